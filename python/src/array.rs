//! Numpy arrays over tensors' storage, without a copy: the one module of
//! the bindings with `unsafe`.
//!
//! The tensors handed to Python by one call are first made the only
//! owners of their bytes ([`Tensor::bytes_mut`] copies them if anything
//! else shares them), then moved into one [`Owner`] that is the base
//! object of every array over them: the bytes live as long as any of the
//! arrays (or a view of one), nothing in Rust reads or writes them again,
//! so the arrays can be writable (`torch.from_numpy` takes them without a
//! copy or a warning).

use std::ptr;

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_WRITEABLE, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pool::tensordict::{DType, Tensor, TensorDictError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use smallvec::SmallVec;

/// Keeps the storage of a call's tensors alive for the numpy arrays over
/// them.
#[pyclass(frozen, module = "rlpool._native")]
pub(crate) struct Owner {
    _tensors: Vec<Tensor>,
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

/// One array to make: where its elements are, and their dtype and shape.
struct Planned {
    dtype: DType,
    dims: SmallVec<[npy_intp; 4]>,
    data: *mut u8,
}

/// Tensors gathered for arrays that share one [`Owner`]: [`Arrays::add`]
/// each, then [`Arrays::finish`] turns them into arrays, in order.
pub(crate) struct Arrays {
    tensors: Vec<Tensor>,
    planned: Vec<Planned>,
}

impl Arrays {
    /// Room for a result's usual number of entries.
    pub(crate) fn new() -> Arrays {
        Arrays {
            tensors: Vec::with_capacity(8),
            planned: Vec::with_capacity(8),
        }
    }

    /// Plans an array over `tensor`'s elements (copied first only if their
    /// storage is shared); returns its index for [`Arrays::finish`].
    pub(crate) fn add(&mut self, mut tensor: Tensor) -> PyResult<usize> {
        let mut dims = SmallVec::new();
        for &d in tensor.shape() {
            dims.push(npy_intp::try_from(d).map_err(|_| {
                PyValueError::new_err(format!("shape {:?} is too large for numpy", tensor.shape()))
            })?);
        }
        // Unique from here on: no other tensor sees these bytes. Moving
        // the tensor (below) does not move them.
        let data = tensor.bytes_mut().as_mut_ptr();
        self.planned.push(Planned {
            dtype: tensor.dtype(),
            dims,
            data,
        });
        self.tensors.push(tensor);
        Ok(self.planned.len() - 1)
    }

    /// The planned arrays, in the order of [`Arrays::add`], all based on
    /// one owner of their tensors.
    pub(crate) fn finish(self, py: Python<'_>) -> PyResult<Vec<Bound<'_, PyAny>>> {
        if self.planned.is_empty() {
            return Ok(Vec::new());
        }
        let owner = Bound::new(
            py,
            Owner {
                _tensors: self.tensors,
            },
        )?;
        let mut arrays = Vec::with_capacity(self.planned.len());
        for mut planned in self.planned {
            let ndim = std::os::raw::c_int::try_from(planned.dims.len())
                .map_err(|_| PyValueError::new_err("too many dims for numpy"))?;
            let descr = descr(py, planned.dtype);
            // SAFETY: `descr` is a valid dtype (its reference is given to
            // numpy by `into_dtype_ptr`); `dims` holds `ndim` sizes;
            // `data` points to a tensor's bytes, exactly `prod(dims) *
            // itemsize` of them, aligned for the dtype (storage is 8-byte
            // aligned and a view's offset is a multiple of the dtype's
            // size), unaliased by Rust (the tensor is the storage's only
            // owner and nothing reads it again) and valid for as long as
            // `owner` lives, which every array keeps as its base. Null
            // strides ask for C order.
            unsafe {
                let array = PY_ARRAY_API.PyArray_NewFromDescr(
                    py,
                    npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                    descr.into_dtype_ptr(),
                    ndim,
                    planned.dims.as_mut_ptr(),
                    ptr::null_mut(),
                    planned.data.cast(),
                    NPY_ARRAY_WRITEABLE,
                    ptr::null_mut(),
                );
                if array.is_null() {
                    return Err(PyErr::fetch(py));
                }
                let array = Bound::from_owned_ptr(py, array);
                // Steals a new reference to `owner` (also on failure).
                let base = owner.clone().into_ptr();
                if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), base) < 0 {
                    return Err(PyErr::fetch(py));
                }
                arrays.push(array);
            }
        }
        Ok(arrays)
    }
}

/// A dtype's numpy name.
pub(crate) fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// The tensor dtype of a numpy dtype, if there is one.
pub(crate) fn dtype_of(descr: &Bound<'_, PyArrayDescr>) -> Option<DType> {
    // `None`: byte order does not apply (one-byte types).
    if descr.is_native_byteorder() == Some(false) {
        return None;
    }
    match (descr.kind(), descr.itemsize()) {
        (b'b', 1) => Some(DType::Bool),
        (b'u', 1) => Some(DType::U8),
        (b'i', 1) => Some(DType::I8),
        (b'i', 2) => Some(DType::I16),
        (b'i', 4) => Some(DType::I32),
        (b'i', 8) => Some(DType::I64),
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        _ => None,
    }
}

/// A tensor with a copy of the elements of a C-contiguous array of dtype
/// `dtype` (as [`dtype_of`] gives it) and shape `shape`.
pub(crate) fn tensor_from_array(
    array: &Bound<'_, PyUntypedArray>,
    dtype: DType,
    shape: &[usize],
) -> Result<Tensor, TensorDictError> {
    debug_assert!(array.is_c_contiguous());
    let mut tensor = Tensor::try_zeros(dtype, shape)?;
    let bytes = tensor.bytes_mut();
    if !bytes.is_empty() {
        // SAFETY: the array is C-contiguous with `shape` and an element
        // size of `dtype`'s (checked by the caller), so its data pointer
        // is valid for reads of exactly `bytes.len()` bytes; the GIL is
        // held, so no Python code of this process frees or resizes it
        // meanwhile; `bytes` is the new tensor's own storage, so the two
        // do not overlap. A raw copy makes no Rust reference to numpy's
        // memory (which other native code may write concurrently).
        unsafe {
            let data = (*npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr()))
                .data
                .cast::<u8>();
            ptr::copy_nonoverlapping(data, bytes.as_mut_ptr(), bytes.len());
        }
    }
    if dtype == DType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(TensorDictError::InvalidBytes {
            dtype,
            reason: "a bool array holds bytes other than 0 and 1".into(),
        });
    }
    Ok(tensor)
}
