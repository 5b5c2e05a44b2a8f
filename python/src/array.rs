//! Numpy arrays over the elements of a call's results: the one module of
//! the bindings with `unsafe`.
//!
//! Every array a call hands to Python is based on one [`Owner`] of their
//! elements: small entries (up to [`SMALL`] bytes, which is nearly all of
//! them) are copied into one buffer of the call's own (one allocation
//! for all, whatever storage the pool still shares); a large tensor is
//! moved into the owner and made the only owner of its bytes
//! ([`Tensor::bytes_mut`] copies them if the pool still shares them). The
//! bytes live as long as any of the arrays (or a view of one), nothing in
//! Rust reads or writes them again and no two arrays overlap, so the
//! arrays can be writable (`torch.from_numpy` takes them without a copy or
//! a warning) and stay unchanged by later calls.

use std::ptr;

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_WRITEABLE, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pool::tensordict::{DType, NonTensor, Tensor, TensorDictError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use smallvec::SmallVec;

/// Keeps the elements of a call's arrays alive: small ones copied into
/// one buffer, large ones in their own tensors.
#[pyclass(frozen, module = "rlpool._native")]
pub(crate) struct Owner {
    /// Never read by Rust: numpy reads and writes it through the arrays.
    _buffer: Vec<u64>,
    _tensors: Vec<Tensor>,
}

/// Tensors of at most this many bytes are copied into the call's one
/// buffer (one allocation for all of them, whatever their storage);
/// larger ones keep their storage, copied only if it is shared.
const SMALL: usize = 64 * 1024;

/// A new instance of `ty` (a Python class whose `__new__` is
/// `object.__new__`), its `__init__` not run and its slots unset: what
/// `object.__new__(ty)` returns, without the call.
pub(crate) fn alloc_instance<'py>(ty: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    // SAFETY: `ty` is a valid, ready type object (a live class); its
    // `tp_alloc` (inherited from `object` for a Python class) returns a new
    // reference to a zeroed instance of `ty`, or null with an exception
    // set, which `from_owned_ptr_or_err` turns into the error.
    unsafe {
        let tp = ty.as_type_ptr();
        let alloc = (*tp).tp_alloc.unwrap_or(pyo3::ffi::PyType_GenericAlloc);
        Bound::from_owned_ptr_or_err(py, alloc(tp, 0))
    }
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

/// Where a planned array's elements are.
enum Place {
    /// At this byte offset in [`Arrays`]'s buffer.
    Buffer(usize),
    /// In this tensor of [`Arrays`]'s own.
    Tensor(usize),
}

/// One array to make: where its elements are, and their dtype and shape.
struct Planned {
    dtype: DType,
    dims: SmallVec<[npy_intp; 4]>,
    place: Place,
}

/// The elements gathered for arrays that share one [`Owner`]:
/// [`Arrays::add`] (or [`Arrays::add_ints`]) each, then [`Arrays::finish`]
/// turns them into arrays, in order.
pub(crate) struct Arrays {
    /// Small tensors' bytes, each at an 8-byte aligned offset.
    buffer: Vec<u64>,
    tensors: Vec<Tensor>,
    planned: SmallVec<[Planned; 16]>,
}

fn dims_of(shape: &[usize]) -> PyResult<SmallVec<[npy_intp; 4]>> {
    // A plain loop: collecting `Result`s into a `SmallVec` costs more than
    // the rest of planning an array.
    let mut dims = SmallVec::new();
    for &d in shape {
        dims.push(npy_intp::try_from(d).map_err(|_| {
            PyValueError::new_err(format!("shape {shape:?} is too large for numpy"))
        })?);
    }
    Ok(dims)
}

thread_local! {
    /// The size of the last call's buffer: the next one is likely the same.
    static LAST_WORDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Arrays {
    /// Room for a result's usual number of entries.
    pub(crate) fn new() -> Arrays {
        Arrays {
            buffer: Vec::with_capacity(LAST_WORDS.with(std::cell::Cell::get)),
            tensors: Vec::new(),
            planned: SmallVec::new(),
        }
    }

    /// Room for `bytes` more bytes at the end of the buffer: their offset.
    fn grow(&mut self, bytes: usize) -> usize {
        let offset = self.buffer.len() * 8;
        self.buffer.resize(self.buffer.len() + bytes.div_ceil(8), 0);
        offset
    }

    /// Plans an array over a copy of `tensor`'s elements (small ones, into
    /// the call's buffer), or over `tensor`'s own storage (large ones: made
    /// unique in [`Arrays::finish`], once the caller dropped its other
    /// holders); returns its index for [`Arrays::finish`].
    pub(crate) fn add(&mut self, tensor: &Tensor) -> PyResult<usize> {
        let dims = dims_of(tensor.shape())?;
        let bytes = tensor.as_bytes();
        let place = if bytes.len() <= SMALL {
            let offset = self.grow(bytes.len());
            let words: &mut [u64] = &mut self.buffer;
            let dst: &mut [u8] = bytemuck::cast_slice_mut(words);
            dst[offset..offset + bytes.len()].copy_from_slice(bytes);
            Place::Buffer(offset)
        } else {
            self.tensors.push(tensor.clone());
            Place::Tensor(self.tensors.len() - 1)
        };
        self.planned.push(Planned {
            dtype: tensor.dtype(),
            dims,
            place,
        });
        Ok(self.planned.len() - 1)
    }

    /// Plans an `int64` array over the ints of `value` (an int, or
    /// nested stacks of ints such as `env_index`), of its shape, copied
    /// into the call's buffer; `None`, planning nothing, for any other
    /// value (or a ragged one).
    pub(crate) fn add_ints(&mut self, value: &NonTensor) -> PyResult<Option<usize>> {
        if let NonTensor::Stack(items) = value {
            // A flat stack of ints (the `env_index` of unbatched envs): its
            // shape is its length, found without a look at each item's.
            let start = self.buffer.len();
            self.buffer.reserve(items.len());
            let flat = items.iter().all(|item| match item {
                NonTensor::Int(v) => {
                    self.buffer.push(*v as u64);
                    true
                }
                _ => false,
            });
            if flat {
                self.planned.push(Planned {
                    dtype: DType::I64,
                    dims: dims_of(&[items.len()])?,
                    place: Place::Buffer(start * 8),
                });
                return Ok(Some(self.planned.len() - 1));
            }
            self.buffer.truncate(start);
        }
        let shape = value.shape();
        let dims = dims_of(&shape)?;
        let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let start = self.buffer.len();
        self.buffer.reserve(numel.unwrap_or(0));
        if !push_ints(value, &mut self.buffer) || numel != Some(self.buffer.len() - start) {
            self.buffer.truncate(start);
            return Ok(None);
        }
        self.planned.push(Planned {
            dtype: DType::I64,
            dims,
            place: Place::Buffer(start * 8),
        });
        Ok(Some(self.planned.len() - 1))
    }

    /// The planned arrays, in the order of [`Arrays::add`], all based on
    /// one owner of their elements. Large tensors are made unique here
    /// (copied if something else still shares their storage).
    pub(crate) fn finish(mut self, py: Python<'_>) -> PyResult<Vec<Bound<'_, PyAny>>> {
        if self.planned.is_empty() {
            return Ok(Vec::new());
        }
        LAST_WORDS.with(|last| last.set(self.buffer.len()));
        let base = self.buffer.as_mut_ptr().cast::<u8>();
        // Unique from here on: no other tensor sees these bytes. Moving the
        // tensors (into the owner) does not move them.
        let own: SmallVec<[*mut u8; 4]> = self
            .tensors
            .iter_mut()
            .map(|tensor| tensor.bytes_mut().as_mut_ptr())
            .collect();
        let owner = Bound::new(
            py,
            Owner {
                _buffer: self.buffer,
                _tensors: self.tensors,
            },
        )?;
        let mut arrays = Vec::with_capacity(self.planned.len());
        for mut planned in self.planned {
            let data = match planned.place {
                // `wrapping_add`: in bounds (the offset and size were
                // reserved in the buffer), and no dereference here.
                Place::Buffer(offset) => base.wrapping_add(offset),
                Place::Tensor(i) => own[i],
            };
            let ndim = std::os::raw::c_int::try_from(planned.dims.len())
                .map_err(|_| PyValueError::new_err("too many dims for numpy"))?;
            let descr = descr(py, planned.dtype);
            // SAFETY: `descr` is a valid dtype (its reference is given to
            // numpy by `into_dtype_ptr`); `dims` holds `ndim` sizes;
            // `data` points to exactly `prod(dims) * itemsize` bytes,
            // aligned for the dtype (the buffer's offsets are multiples of
            // 8; tensor storage is 8-byte aligned and a view's offset is a
            // multiple of the dtype's size), of this array alone (a
            // buffer range of its own, or a tensor that is its storage's
            // only owner), which Rust never reads or writes again and
            // which stay valid for as long as `owner` lives (moving the
            // buffer or the tensors into it moved no heap bytes); every
            // array keeps `owner` as its base. Null strides ask for C
            // order.
            unsafe {
                let array = PY_ARRAY_API.PyArray_NewFromDescr(
                    py,
                    npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                    descr.into_dtype_ptr(),
                    ndim,
                    planned.dims.as_mut_ptr(),
                    ptr::null_mut(),
                    data.cast(),
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

/// Appends the ints of `value` to `out` (as their two's complement bits:
/// the words are the `int64`s); `false` if it holds anything else.
fn push_ints(value: &NonTensor, out: &mut Vec<u64>) -> bool {
    match value {
        NonTensor::Int(v) => {
            out.push(*v as u64);
            true
        }
        NonTensor::Stack(items) => items.iter().all(|item| match item {
            NonTensor::Int(v) => {
                out.push(*v as u64);
                true
            }
            other => push_ints(other, out),
        }),
        _ => false,
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
    copy_elements(array, bytes);
    if dtype == DType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(TensorDictError::InvalidBytes {
            dtype,
            reason: "a bool array holds bytes other than 0 and 1".into(),
        });
    }
    Ok(tensor)
}

/// The values of a C-contiguous `int64` or `int32` array (native byte
/// order, any shape), copied without numpy's borrow tracking (whose global
/// lock and hash map cost more than the copy of a few indices); `None` for
/// any other array.
pub(crate) fn read_ints(array: &Bound<'_, PyUntypedArray>) -> Option<Vec<i64>> {
    if !array.is_c_contiguous() {
        return None;
    }
    let len = array.len();
    match dtype_of(&array.dtype())? {
        DType::I64 => {
            let mut out = vec![0i64; len];
            copy_elements(array, bytemuck::cast_slice_mut(&mut out));
            Some(out)
        }
        DType::I32 => {
            let mut out = vec![0u64; len.div_ceil(2)];
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut out)[..len * 4];
            copy_elements(array, bytes);
            Some(
                bytes
                    .chunks_exact(4)
                    .map(|c| i64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            )
        }
        _ => None,
    }
}

/// Copies the elements of a C-contiguous array of exactly `dst.len()`
/// bytes of data into `dst`.
pub(crate) fn copy_elements(array: &Bound<'_, PyUntypedArray>, dst: &mut [u8]) {
    debug_assert!(array.is_c_contiguous());
    if dst.is_empty() {
        return;
    }
    // SAFETY: the array is C-contiguous and its data is `dst.len()` bytes
    // (the caller's dtype and element count), so its data pointer is valid
    // for reads of that many bytes; the GIL is held, so no Python code of
    // this process frees or resizes it meanwhile; `dst` is Rust's own
    // memory, so the two do not overlap. A raw byte copy makes no Rust
    // reference to numpy's memory and needs no alignment.
    unsafe {
        let data = (*npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr()))
            .data
            .cast::<u8>();
        ptr::copy_nonoverlapping(data, dst.as_mut_ptr(), dst.len());
    }
}
