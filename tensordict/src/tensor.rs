//! `Tensor`: a dtype, a shape and a view into shared, 8-byte-aligned storage
//! that is copied on write.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::lent::RowBlock;
use crate::{DType, Element, TensorDictError};

/// A shape: the size of each dimension. Up to four dims live inline.
pub type Shape = SmallVec<[usize; 4]>;

/// `dims` as a [`Shape`], copied at once (`SmallVec`'s `From<&[T]>` and
/// `Clone` go element by element through its generic `Extend`: a few
/// times the instructions, on every tensor made or cloned).
#[inline]
pub(crate) fn shape_of(dims: &[usize]) -> Shape {
    Shape::from_slice(dims)
}

/// The shape `[first, rest..]` (a batch of rows of shape `rest`), made at
/// once as [`shape_of`].
#[inline]
pub(crate) fn shape_with_first(first: usize, rest: &[usize]) -> Shape {
    let mut shape = Shape::from_elem(first, rest.len() + 1);
    shape[1..].copy_from_slice(rest);
    shape
}

/// The backing bytes of one or more tensors, kept in `u64` words so that
/// every dtype is aligned.
///
/// Cache-line aligned so that, inside its `Arc`, the reference counts and
/// the vector's header sit on different lines: a thread reading a tensor's
/// bytes does not take the counts' line away from the thread that writes it
/// (whose `Arc::get_mut` updates a count on every write).
#[derive(Clone)]
#[repr(align(64))]
struct Storage {
    words: Vec<u64>,
}

impl Storage {
    fn zeroed(nbytes: usize) -> Storage {
        Storage {
            words: vec![0; nbytes.div_ceil(8)],
        }
    }

    /// As [`Storage::zeroed`], or `None` if the memory cannot be had (a
    /// size from outside: no panic, no abort).
    fn try_zeroed(nbytes: usize) -> Option<Storage> {
        let mut words = Vec::new();
        let len = nbytes.div_ceil(8);
        words.try_reserve_exact(len).ok()?;
        words.resize(len, 0);
        Some(Storage { words })
    }

    /// A storage holding a copy of `bytes`.
    fn copy_of(bytes: &[u8]) -> Storage {
        let mut storage = Storage::zeroed(bytes.len());
        storage.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        storage
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.words)
    }
}

/// A dense, row-major tensor of one [`DType`].
///
/// A tensor is a view (`offset`, `shape`) into shared storage: `clone`,
/// [`Tensor::unbind`], [`Tensor::index`] and [`Tensor::reshape`] copy no
/// element. Mutation ([`Tensor::as_mut_slice`], [`Tensor::copy_from`]) copies
/// the viewed elements first if the storage is shared (copy on write), so a
/// tensor someone else still holds never changes under them. Stacking views
/// that already sit side by side in one storage copies nothing either.
/// The exception is a row view of a lent batch ([`crate::LentRows`]): it
/// writes its row in place, and its clones and views are copies, so that
/// it stays the only tensor that sees its row.
///
/// Equality is bit-for-bit: same dtype, same shape, same bytes.
///
/// ```
/// use tensordict::{DType, Tensor};
/// # fn main() -> Result<(), tensordict::TensorDictError> {
/// let a = Tensor::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0])?;
/// let mut b = a.clone();                      // shares storage
/// b.as_mut_slice::<f32>()?[0] = 10.0;         // copies, then writes
/// assert_eq!(a.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
/// assert_eq!(b.as_slice::<f32>()?[0], 10.0);
///
/// let rows = a.unbind()?;                     // views, no copy
/// assert_eq!(rows[1].as_slice::<f32>()?, &[3.0, 4.0]);
/// assert_eq!(Tensor::stack(&rows)?, a);       // side by side: no copy
/// assert!(a.as_slice::<i64>().is_err());      // typed error, not a panic
/// assert_eq!(Tensor::zeros(DType::U8, &[84, 84, 4]).numel(), 28_224);
/// # Ok(()) }
/// ```
pub struct Tensor {
    dtype: DType,
    shape: Shape,
    /// Offset of the first element, in bytes (a multiple of the dtype size).
    offset: usize,
    /// Size of the viewed elements in bytes (kept: every access needs it).
    nbytes: usize,
    storage: Backing,
}

/// What a tensor's bytes live in.
enum Backing {
    /// Storage shared by clones and views, copied on write.
    Shared(Arc<Storage>),
    /// A row of a lent batch ([`crate::LentRows`]): this tensor is the only
    /// tensor that views these bytes (every clone or view of it copies
    /// them), and writes them in place.
    Row(Arc<RowBlock>),
}

/// A storage of [`Tensor::packed`], which [`Tensor::in_packed`] tensors view.
pub(crate) struct Packed(Arc<Storage>);

/// Storages of [`Tensor::packed`] batches kept for reuse: the last two, so
/// that a receiver that holds one batch while it asks for the next (and
/// then drops the one before) gets the storage of the one before back.
#[derive(Default)]
pub(crate) struct Recycled(SmallVec<[Arc<Storage>; 2]>);

impl Recycled {
    /// How many storages are kept.
    const KEPT: usize = 2;

    /// A storage of `nbytes` bytes that only this cache holds (no tensor
    /// views it), taken out of the cache; else a new one.
    fn take(&mut self, nbytes: usize) -> Arc<Storage> {
        let words = nbytes.div_ceil(8);
        let free = self
            .0
            .iter()
            .position(|s| Arc::strong_count(s) == 1 && s.words.len() == words);
        match free {
            Some(i) => {
                // Acquire: pairs with the Release decrement of the last
                // tensor's drop, so its reads happen before our writes
                // (`Arc::get_mut` checks again, with its own ordering).
                std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                self.0.remove(i)
            }
            None => Arc::new(Storage::zeroed(nbytes)),
        }
    }

    /// Keeps `storage` for a later [`Recycled::take`], dropping the oldest
    /// kept beyond [`Recycled::KEPT`].
    fn keep(&mut self, storage: &Arc<Storage>) {
        if self.0.len() == Recycled::KEPT {
            self.0.remove(0);
        }
        self.0.push(Arc::clone(storage));
    }
}

impl fmt::Debug for Recycled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recycled({} storages)", self.0.len())
    }
}

/// Number of elements of a shape, `None` on overflow.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    fn nbytes_of(dtype: DType, shape: &[usize]) -> Result<usize, TensorDictError> {
        checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| TensorDictError::ShapeTooLarge {
                shape: shape.to_vec(),
            })
    }

    /// A tensor of zeros (`false` for bool).
    ///
    /// # Panics
    /// If the shape's size in bytes overflows `usize` (use
    /// [`Tensor::try_zeros`] for shapes that come from outside).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        Tensor::try_zeros(dtype, shape).expect("shape too large")
    }

    /// A tensor of zeros, or an error if the shape's size overflows or
    /// its memory cannot be had.
    pub fn try_zeros(dtype: DType, shape: &[usize]) -> Result<Tensor, TensorDictError> {
        let nbytes = Tensor::nbytes_of(dtype, shape)?;
        let storage =
            Storage::try_zeroed(nbytes).ok_or_else(|| TensorDictError::ShapeTooLarge {
                shape: shape.to_vec(),
            })?;
        Ok(Tensor {
            dtype,
            shape: shape_of(shape),
            offset: 0,
            nbytes,
            storage: Backing::Shared(Arc::new(storage)),
        })
    }

    /// The view of `nbytes` bytes at `offset` of a lent batch's block:
    /// for [`crate::LentRows`], which makes one per row and leaf, and no
    /// other.
    pub(crate) fn row_view(
        dtype: DType,
        shape: &[usize],
        block: &Arc<RowBlock>,
        offset: usize,
        nbytes: usize,
    ) -> Tensor {
        debug_assert!(offset + nbytes <= block.len());
        Tensor {
            dtype,
            shape: shape_of(shape),
            offset,
            nbytes,
            storage: Backing::Row(Arc::clone(block)),
        }
    }

    /// Whether this tensor is the view at `offset` of `block`.
    pub(crate) fn is_row_view(&self, block: &Arc<RowBlock>, offset: usize) -> bool {
        self.is_in_block(block) && self.offset == offset
    }

    /// Whether this tensor is a view of a row of `block`.
    pub(crate) fn is_in_block(&self, block: &Arc<RowBlock>) -> bool {
        matches!(&self.storage, Backing::Row(b) if Arc::ptr_eq(b, block))
    }

    /// One storage for a whole batch's tensors (`total` bytes, the sum of
    /// their byte counts each rounded up to 8), its bytes written by
    /// `fill`: one allocation per batch, or none when `recycled` holds a
    /// storage of that size that no tensor views any more (a batch its
    /// receiver dropped). The tensors are then made with
    /// [`Tensor::in_packed`], each at an 8-byte-aligned offset; each is
    /// copied on its first write, as any tensor whose storage is shared.
    pub(crate) fn packed(
        total: usize,
        recycled: &mut Recycled,
        fill: impl FnOnce(&mut [u8]),
    ) -> Packed {
        let mut storage = recycled.take(total);
        // Unique: just made, or no tensor views it (`Recycled::take`).
        let bytes = Arc::get_mut(&mut storage)
            .expect("a storage no one else holds")
            .bytes_mut();
        fill(&mut bytes[..total]);
        recycled.keep(&storage);
        Packed(storage)
    }

    /// The tensor of `dtype` and `shape` (of `nbytes` bytes, the shape's,
    /// which the caller computed) at `offset` of `packed`.
    ///
    /// # Panics
    /// If the bytes are not inside the storage.
    #[inline]
    pub(crate) fn in_packed(
        dtype: DType,
        shape: Shape,
        offset: usize,
        nbytes: usize,
        packed: &Packed,
    ) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>() * dtype.size(), nbytes);
        assert!(
            offset
                .checked_add(nbytes)
                .is_some_and(|end| end <= packed.0.words.len() * 8),
            "a tensor outside its packed storage"
        );
        Tensor {
            dtype,
            shape,
            offset,
            nbytes,
            storage: Backing::Shared(Arc::clone(&packed.0)),
        }
    }

    /// A tensor of this dtype and shape holding a copy of `bytes` (as many
    /// as the shape needs, checked by the caller, a crate function whose
    /// bytes come from a tensor of this dtype).
    pub(crate) fn from_trusted_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Tensor {
        Tensor {
            dtype,
            shape: shape_of(shape),
            offset: 0,
            nbytes: bytes.len(),
            storage: Backing::Shared(Arc::new(Storage::copy_of(bytes))),
        }
    }

    /// A tensor with every element equal to `value`.
    ///
    /// # Panics
    /// If the shape's size in bytes overflows `usize` (use
    /// [`Tensor::try_full`] for shapes that come from outside).
    pub fn full<T: Element>(shape: &[usize], value: T) -> Tensor {
        Tensor::try_full(shape, value).expect("shape too large")
    }

    /// A tensor with every element equal to `value`, or an error if the
    /// shape's size overflows.
    pub fn try_full<T: Element>(shape: &[usize], value: T) -> Result<Tensor, TensorDictError> {
        let mut tensor = Tensor::try_zeros(T::DTYPE, shape)?;
        if value != T::default() {
            tensor.as_mut_slice::<T>()?.fill(value);
        }
        Ok(tensor)
    }

    /// A tensor holding `values` in row-major order; an error if their
    /// number does not fill `shape`.
    pub fn from_vec<T: Element>(
        shape: &[usize],
        values: Vec<T>,
    ) -> Result<Tensor, TensorDictError> {
        Tensor::from_slice(shape, &values)
    }

    /// A tensor holding a copy of `values`; an error if their number does
    /// not fill `shape`.
    pub fn from_slice<T: Element>(
        shape: &[usize],
        values: &[T],
    ) -> Result<Tensor, TensorDictError> {
        let expected = checked_numel(shape).ok_or_else(|| TensorDictError::ShapeTooLarge {
            shape: shape.to_vec(),
        })?;
        if expected != values.len() {
            return Err(TensorDictError::ElementCount {
                shape: shape.to_vec(),
                expected,
                found: values.len(),
            });
        }
        let mut tensor = Tensor::try_zeros(T::DTYPE, shape)?;
        tensor.bytes_mut().copy_from_slice(T::bytes(values));
        Ok(tensor)
    }

    /// A tensor of shape `[]` holding one value.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::full(&[], value)
    }

    /// A tensor from raw little-endian bytes; an error if their length does
    /// not fit the shape or (for bool) a byte is neither 0 nor 1.
    pub fn from_bytes(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Tensor, TensorDictError> {
        let nbytes = Tensor::nbytes_of(dtype, shape)?;
        if nbytes != bytes.len() {
            return Err(TensorDictError::InvalidBytes {
                dtype,
                reason: format!(
                    "shape {shape:?} needs {nbytes} bytes but {} were given",
                    bytes.len()
                ),
            });
        }
        if dtype == DType::Bool {
            if let Some(pos) = bytes.iter().position(|&b| b > 1) {
                return Err(TensorDictError::InvalidBytes {
                    dtype,
                    reason: format!("byte {pos} is {} (a bool is 0 or 1)", bytes[pos]),
                });
            }
        }
        let mut tensor = Tensor::try_zeros(dtype, shape)?;
        tensor.bytes_mut().copy_from_slice(bytes);
        Ok(tensor)
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        // Cannot overflow: checked when the storage was made.
        self.shape.iter().product()
    }

    /// Size of the elements in bytes.
    #[inline]
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The elements' bytes, row-major, native (little-endian) order.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.storage {
            Backing::Shared(storage) => &storage.bytes()[self.offset..self.offset + self.nbytes],
            #[allow(unsafe_code)]
            // SAFETY: a row view is the only tensor that views its bytes
            // (`Backing::Row`), and writes them only through `&mut self`
            // (`bytes_mut`), which this borrow excludes; the lent batch
            // reads or writes them only where its (unsafe) methods' callers
            // promise that no view of those rows is in use. The range is
            // the view's own, inside the block (checked when it was made).
            Backing::Row(block) => unsafe { block.bytes(self.offset, self.nbytes) },
        }
    }

    /// Makes this tensor the only owner of the bytes it views, copying them
    /// if the storage is shared (copy on write). A row view is the only one
    /// already.
    fn make_unique(&mut self) {
        let Backing::Shared(shared) = &self.storage else {
            return;
        };
        // The storage is never shared through a `Weak`, so a strong count of
        // one means no other tensor can see it.
        if Arc::strong_count(shared) != 1 {
            self.storage = Backing::Shared(Arc::new(Storage::copy_of(self.as_bytes())));
            self.offset = 0;
        } else {
            // Acquire: pairs with the Release decrement of the last other
            // owner's drop (as `Arc::get_mut` does), so that its reads of
            // the bytes happen before the writes that follow.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
    }

    /// The elements' bytes, writable; copies them first if shared. A row
    /// of a lent batch is written in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.make_unique();
        let range = self.offset..self.offset + self.nbytes;
        let shared = match &self.storage {
            Backing::Shared(shared) => shared,
            #[allow(unsafe_code)]
            // SAFETY: as in `as_bytes`; `&mut self` excludes every other
            // access through this view, the only one of its bytes.
            Backing::Row(block) => return unsafe { block.bytes_mut(self.offset, self.nbytes) },
        };
        // `Arc::get_mut` would check uniqueness again with a
        // compare-and-swap on the counts' cache line: a write to the line
        // that every reader of a shared batch column reads, which then
        // moves between cores on every write of a worker's rows.
        #[allow(unsafe_code)]
        // SAFETY: after `make_unique` this tensor holds the only strong
        // reference to its storage, and no `Weak` to a storage is ever made
        // (the field is private, and only `Arc::new` and `Arc::clone` make
        // references): no other tensor, on any thread, can reach it, and
        // none can be made while `&mut self` is borrowed, since cloning
        // needs `&self`. The fence in `make_unique` orders the last other
        // owner's accesses before ours. The pointer comes from
        // `Arc::as_ptr`, which keeps the allocation's write permission (the
        // same access `Arc::get_mut` gives), and lives no longer than the
        // `&mut self` borrow.
        let storage = unsafe { &mut *Arc::as_ptr(shared).cast_mut() };
        &mut storage.bytes_mut()[range]
    }

    fn check_dtype<T: Element>(&self) -> Result<(), TensorDictError> {
        if self.dtype == T::DTYPE {
            Ok(())
        } else {
            Err(TensorDictError::DTypeMismatch {
                expected: T::DTYPE,
                found: self.dtype,
            })
        }
    }

    /// The elements as a typed slice; an error if `T` is not the dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], TensorDictError> {
        self.check_dtype::<T>()?;
        T::cast(self.as_bytes()).ok_or_else(|| TensorDictError::InvalidBytes {
            dtype: self.dtype,
            reason: "storage is not a valid slice of this dtype".into(),
        })
    }

    /// The elements as a mutable typed slice (copy on write); an error if
    /// `T` is not the dtype.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], TensorDictError> {
        self.check_dtype::<T>()?;
        let dtype = self.dtype;
        T::cast_mut(self.bytes_mut()).ok_or_else(|| TensorDictError::InvalidBytes {
            dtype,
            reason: "storage is not a valid slice of this dtype".into(),
        })
    }

    /// The elements copied into a `Vec`.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorDictError> {
        Ok(self.as_slice::<T>()?.to_vec())
    }

    /// The single element of a tensor with one element (any shape).
    pub fn item<T: Element>(&self) -> Result<T, TensorDictError> {
        match self.as_slice::<T>()? {
            [one] => Ok(*one),
            other => Err(TensorDictError::ElementCount {
                shape: self.shape.to_vec(),
                expected: 1,
                found: other.len(),
            }),
        }
    }

    /// Every element converted to `f64` (for checks and display).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        fn conv<T: Element>(t: &Tensor) -> Vec<f64> {
            t.as_slice::<T>()
                .map(|s| s.iter().map(|v| v.to_f64()).collect())
                .unwrap_or_default()
        }
        match self.dtype {
            DType::Bool => conv::<bool>(self),
            DType::U8 => conv::<u8>(self),
            DType::I8 => conv::<i8>(self),
            DType::I16 => conv::<i16>(self),
            DType::I32 => conv::<i32>(self),
            DType::I64 => conv::<i64>(self),
            DType::F32 => conv::<f32>(self),
            DType::F64 => conv::<f64>(self),
        }
    }

    /// Sets every element to `value` (copy on write if shared); an error if
    /// `T` is not the dtype. Unlike a write through
    /// [`Tensor::as_mut_slice`], it reads none of the old elements (a
    /// `bool` slice checks each byte first): an env that writes its flags
    /// into a row of a batch that other threads' envs write beside it does
    /// not wait for the cache line to come back before it writes.
    ///
    /// ```
    /// use tensordict::{DType, Tensor};
    /// # fn main() -> Result<(), tensordict::TensorDictError> {
    /// let mut done = Tensor::zeros(DType::Bool, &[2]);
    /// done.fill(true)?;
    /// assert_eq!(done.to_vec::<bool>()?, vec![true, true]);
    /// assert!(done.fill(1.0f32).is_err());
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn fill<T: Element>(&mut self, value: T) -> Result<(), TensorDictError> {
        self.check_dtype::<T>()?;
        let one = T::bytes(std::slice::from_ref(&value));
        let bytes = self.bytes_mut();
        if bytes.len() == std::mem::size_of::<T>() {
            // One element (a flag, a reward): one store.
            bytes.copy_from_slice(one);
        } else {
            for element in bytes.chunks_exact_mut(one.len()) {
                element.copy_from_slice(one);
            }
        }
        Ok(())
    }

    /// Copies the elements of `src`, which must have the same dtype and
    /// shape, into this tensor (copy on write if shared).
    pub fn copy_from(&mut self, src: &Tensor) -> Result<(), TensorDictError> {
        if src.dtype != self.dtype || src.shape != self.shape {
            return Err(TensorDictError::CopyMismatch {
                expected: describe(self),
                found: describe(src),
            });
        }
        if self.shares_storage(src) && self.offset == src.offset {
            return Ok(());
        }
        self.bytes_mut().copy_from_slice(src.as_bytes());
        Ok(())
    }

    /// True if both tensors view the same storage (one was derived from the
    /// other without copying).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        match (&self.storage, &other.storage) {
            (Backing::Shared(a), Backing::Shared(b)) => Arc::ptr_eq(a, b),
            (Backing::Row(a), Backing::Row(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The same elements with another shape of the same number of elements
    /// (a view: no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor, TensorDictError> {
        if checked_numel(shape) != Some(self.numel()) {
            return Err(TensorDictError::Reshape {
                from: self.shape.to_vec(),
                to: shape.to_vec(),
            });
        }
        Ok(Tensor {
            shape: shape_of(shape),
            ..self.clone()
        })
    }

    /// Row `index` along dimension 0 (a view: no copy).
    pub fn index(&self, index: usize) -> Result<Tensor, TensorDictError> {
        let (&len, rest) = self
            .shape
            .split_first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "index" })?;
        if index >= len {
            return Err(TensorDictError::IndexOutOfRange { index, len });
        }
        let row_bytes = rest.iter().product::<usize>() * self.dtype.size();
        let offset = self.offset + index * row_bytes;
        Ok(match &self.storage {
            Backing::Shared(storage) => Tensor {
                dtype: self.dtype,
                shape: shape_of(rest),
                offset,
                nbytes: row_bytes,
                storage: Backing::Shared(Arc::clone(storage)),
            },
            // A row view's bytes are seen by it alone: the row is copied.
            Backing::Row(_) => Tensor::from_trusted_bytes(
                self.dtype,
                rest,
                &self.as_bytes()[index * row_bytes..(index + 1) * row_bytes],
            ),
        })
    }

    /// Every row along dimension 0 (views: no copy).
    pub fn unbind(&self) -> Result<Vec<Tensor>, TensorDictError> {
        let len = *self
            .shape
            .first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "unbind" })?;
        (0..len).map(|i| self.index(i)).collect()
    }

    /// Stacks tensors of one dtype and shape along a new dimension 0.
    ///
    /// Copies nothing when the tensors are consecutive rows of one storage
    /// (as the rows that [`Tensor::unbind`] returns); otherwise copies each
    /// into a new storage.
    pub fn stack(tensors: &[Tensor]) -> Result<Tensor, TensorDictError> {
        let first = tensors.first().ok_or_else(|| TensorDictError::EmptyStack)?;
        for (index, t) in tensors.iter().enumerate().skip(1) {
            if t.dtype != first.dtype || t.shape != first.shape {
                return Err(TensorDictError::StackTensors {
                    index,
                    expected: describe(first),
                    found: describe(t),
                });
            }
        }
        let mut shape = Shape::with_capacity(first.ndim() + 1);
        shape.push(tensors.len());
        shape.extend_from_slice(&first.shape);
        // Checked even when nothing is copied: a zero-sized row can make a
        // shape whose element count overflows.
        let nbytes = Tensor::nbytes_of(first.dtype, &shape)?;
        let row = first.nbytes();
        if let Backing::Shared(storage) = &first.storage {
            let side_by_side = tensors.iter().enumerate().all(|(i, t)| {
                matches!(&t.storage, Backing::Shared(s) if Arc::ptr_eq(s, storage))
                    && t.offset == first.offset + i * row
            });
            if side_by_side {
                return Ok(Tensor {
                    dtype: first.dtype,
                    shape,
                    offset: first.offset,
                    nbytes,
                    storage: Backing::Shared(Arc::clone(storage)),
                });
            }
        }
        let mut out = Tensor::try_zeros(first.dtype, &shape)?;
        let bytes = out.bytes_mut();
        if row > 0 {
            for (chunk, t) in bytes.chunks_exact_mut(row).zip(tensors) {
                chunk.copy_from_slice(t.as_bytes());
            }
        }
        Ok(out)
    }
}

/// `shape [2, 3] and dtype f32`, for messages.
pub(crate) fn describe(t: &Tensor) -> String {
    format!("shape {:?} and dtype {}", t.shape(), t.dtype())
}

impl Clone for Tensor {
    /// Shares the storage (copy on write); a row view of a lent batch is
    /// copied, so that it stays the only view of its row.
    fn clone(&self) -> Tensor {
        match &self.storage {
            Backing::Shared(storage) => Tensor {
                dtype: self.dtype,
                shape: shape_of(&self.shape),
                offset: self.offset,
                nbytes: self.nbytes,
                storage: Backing::Shared(Arc::clone(storage)),
            },
            Backing::Row(_) => Tensor::from_trusted_bytes(self.dtype, &self.shape, self.as_bytes()),
        }
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype
            && self.shape == other.shape
            && self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Tensor {}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        let values = self.to_f64_vec();
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, data=[",
            self.shape(),
            self.dtype
        )?;
        for (i, v) in values.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if self.dtype == DType::Bool {
                write!(f, "{}", *v != 0.0)?;
            } else {
                write!(f, "{v}")?;
            }
        }
        if values.len() > SHOWN {
            write!(f, ", ... ({} in all)", values.len())?;
        }
        f.write_str("])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_fill_and_check_counts() {
        let t = Tensor::full(&[2, 3], 1.5f64);
        assert_eq!(t.as_slice::<f64>().unwrap(), &[1.5; 6]);
        assert_eq!(Tensor::scalar(7i64).shape(), &[] as &[usize]);
        assert_eq!(Tensor::scalar(7i64).item::<i64>().unwrap(), 7);
        let err = Tensor::from_vec(&[2, 2], vec![1u8, 2, 3]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "shape [2, 2] holds 4 elements but 3 were given"
        );
        assert!(matches!(
            Tensor::try_zeros(DType::F64, &[usize::MAX, 2]),
            Err(TensorDictError::ShapeTooLarge { .. })
        ));
        // A size that fits `usize` but no memory: an error, not an abort.
        assert!(matches!(
            Tensor::try_zeros(DType::Bool, &[usize::MAX / 2]),
            Err(TensorDictError::ShapeTooLarge { .. })
        ));
    }

    #[test]
    fn typed_access_with_the_wrong_type_is_an_error() {
        let mut t = Tensor::zeros(DType::F32, &[3]);
        let err = t.as_slice::<i32>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "dtype mismatch: the tensor holds f32 but was accessed as i32"
        );
        assert!(t.as_mut_slice::<f64>().is_err());
        assert!(t.item::<f32>().is_err());
    }

    #[test]
    fn clones_share_and_writes_copy() {
        let a = Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap();
        let mut b = a.clone();
        assert!(a.shares_storage(&b));
        b.as_mut_slice::<i32>().unwrap()[1] = 20;
        assert!(!a.shares_storage(&b));
        assert_eq!(a.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
        assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 20, 3]);
        // A unique owner writes in place.
        let ptr = b.as_bytes().as_ptr();
        b.as_mut_slice::<i32>().unwrap()[0] = 10;
        assert_eq!(b.as_bytes().as_ptr(), ptr);
    }

    /// A clone read and dropped on another thread: the write after the
    /// drop is in place (the storage is unique again), the write while the
    /// clone lived copied first, and the reader saw only the old values.
    #[test]
    fn a_write_after_another_threads_clone_is_dropped_is_in_place() {
        let mut a = Tensor::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap();
        for _ in 0..100 {
            let b = a.clone();
            let reader = std::thread::spawn(move || b.to_vec::<i32>().unwrap());
            let before = a.as_bytes().as_ptr();
            let seen = reader.join().unwrap();
            a.as_mut_slice::<i32>().unwrap()[0] += 1;
            assert_eq!(a.as_bytes().as_ptr(), before, "unique again: in place");
            assert_eq!(seen[1..], [2, 3, 4]);
        }
        let held = a.clone();
        a.as_mut_slice::<i32>().unwrap()[0] = 0;
        assert!(!a.shares_storage(&held));
        assert_eq!(held.to_vec::<i32>().unwrap(), vec![101, 2, 3, 4]);
    }

    #[test]
    fn a_row_view_written_copies_only_itself() {
        let a = Tensor::from_vec(&[2, 2], vec![1u8, 2, 3, 4]).unwrap();
        let mut row = a.index(1).unwrap();
        row.as_mut_slice::<u8>().unwrap()[0] = 30;
        assert_eq!(row.to_vec::<u8>().unwrap(), vec![30, 4]);
        assert_eq!(a.to_vec::<u8>().unwrap(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn unbind_index_and_stack() {
        let a = Tensor::from_vec(&[3, 2], vec![0i64, 1, 2, 3, 4, 5]).unwrap();
        let rows = a.unbind().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].to_vec::<i64>().unwrap(), vec![4, 5]);
        let restacked = Tensor::stack(&rows).unwrap();
        assert!(restacked.shares_storage(&a));
        assert_eq!(restacked, a);
        // Out of order: copied, still right.
        let shuffled = Tensor::stack(&[rows[1].clone(), rows[0].clone()]).unwrap();
        assert!(!shuffled.shares_storage(&a));
        assert_eq!(shuffled.to_vec::<i64>().unwrap(), vec![2, 3, 0, 1]);
        assert!(matches!(
            a.index(3),
            Err(TensorDictError::IndexOutOfRange { index: 3, len: 3 })
        ));
        assert!(Tensor::scalar(1.0f32).unbind().is_err());
        assert_eq!(Tensor::stack(&[]), Err(TensorDictError::EmptyStack));
    }

    #[test]
    fn stack_errors_name_the_index_and_shapes() {
        let a = Tensor::zeros(DType::F32, &[3]);
        let b = Tensor::zeros(DType::F32, &[4]);
        let c = Tensor::zeros(DType::F64, &[3]);
        let err = Tensor::stack(&[a.clone(), a.clone(), b]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot stack: tensor 2 has shape [4] and dtype f32 but tensor 0 has shape [3] and dtype f32"
        );
        assert!(Tensor::stack(&[a, c]).is_err());
    }

    #[test]
    fn reshape_is_a_view_and_checks_counts() {
        let a = Tensor::from_vec(&[2, 3], vec![0u8; 6]).unwrap();
        let r = a.reshape(&[3, 2]).unwrap();
        assert!(r.shares_storage(&a));
        assert_eq!(r.shape(), &[3, 2]);
        assert!(a.reshape(&[4]).is_err());
    }

    #[test]
    fn from_bytes_validates_bools_and_lengths() {
        assert!(Tensor::from_bytes(DType::Bool, &[2], &[0, 1]).is_ok());
        assert!(Tensor::from_bytes(DType::Bool, &[2], &[0, 3]).is_err());
        assert!(Tensor::from_bytes(DType::I32, &[2], &[0; 7]).is_err());
        let t = Tensor::from_bytes(DType::I16, &[1], &7i16.to_ne_bytes()).unwrap();
        assert_eq!(t.item::<i16>().unwrap(), 7);
    }

    #[test]
    fn copy_from_checks_shape_and_dtype() {
        let mut dst = Tensor::zeros(DType::F32, &[2]);
        dst.copy_from(&Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap())
            .unwrap();
        assert_eq!(dst.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
        let err = dst.copy_from(&Tensor::zeros(DType::F32, &[3])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot copy a tensor of shape [3] and dtype f32 into one of shape [2] and dtype f32"
        );
        assert!(Tensor::try_full(&[usize::MAX, 2], 1.0f32).is_err());
    }

    #[test]
    fn zero_sized_tensors_work() {
        let t = Tensor::zeros(DType::F32, &[0, 3]);
        assert_eq!(t.numel(), 0);
        assert!(t.unbind().unwrap().is_empty());
        let s = Tensor::stack(&[
            Tensor::zeros(DType::U8, &[0]),
            Tensor::zeros(DType::U8, &[0]),
        ])
        .unwrap();
        assert_eq!(s.shape(), &[2, 0]);
    }
}
