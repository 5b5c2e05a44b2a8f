//! `LentRows`: a batch whose rows are lent out, each as a tensordict of
//! views that its holder writes in place (from any thread), while the
//! batch's owner copies rows out of it: what lets a pool's envs write their
//! results straight into the batch, with no copy per env.
//!
//! [`SharedBlock`] does the same for bytes the crate does not own: a
//! mapping shared between processes, whose ranges tensors view in place.
//!
//! The one module of the crate besides `Tensor::bytes_mut`'s block with
//! `unsafe`: [`RowBlock`] is memory that several threads (or processes)
//! write at once, each its own rows, and that no reference to the whole
//! ever covers.

use std::ptr::NonNull;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::entries::{same_name, Entries};
use crate::rows::{row_mismatch, same_shape};
use crate::tensor::{shape_with_first, Recycled};
use crate::{DType, Entry, NestedKey, Shape, Tensor, TensorDict, TensorDictError};

/// The bytes of one leaf of a lent batch, every row: written through its
/// rows' views ([`Tensor::row_view`]) and copied by the batch's owner, each
/// access within a range that no other access overlaps at that time. Only
/// raw pointers reach it; no `&[u8]` of the whole is ever made.
pub(crate) struct RowBlock {
    /// `words` zeroed `u64`s (8-byte alignment for every dtype), from a
    /// `Box<[u64]>` that [`RowBlock::drop`] frees; or, with a `keeper`,
    /// foreign bytes (8-byte aligned) that the keeper keeps alive.
    ptr: NonNull<u64>,
    words: usize,
    /// The bytes in use (at most `8 * words`).
    len: usize,
    /// What keeps foreign bytes alive ([`SharedBlock::new`]); `None` when
    /// the block owns its box.
    keeper: Option<Arc<dyn Send + Sync>>,
}

#[allow(unsafe_code)]
// SAFETY: a `RowBlock` owns its allocation (as the `Box<[u64]>` it was), or
// holds the keeper of foreign bytes that are valid from any thread while it
// lives (`SharedBlock::new`'s contract); every access goes through the
// unsafe methods below, whose callers keep concurrent accesses to disjoint
// ranges (a view's own row, or rows no view is using), so sharing and
// sending it is as sound as sharing the box's disjoint parts.
unsafe impl Send for RowBlock {}
#[allow(unsafe_code)]
// SAFETY: as for `Send`.
unsafe impl Sync for RowBlock {}

impl RowBlock {
    /// `len` zeroed bytes.
    fn zeroed(len: usize) -> RowBlock {
        let words = len.div_ceil(8);
        let boxed: Box<[u64]> = vec![0u64; words].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u64>()).expect("a box is never null");
        RowBlock {
            ptr,
            words,
            len,
            keeper: None,
        }
    }

    /// The bytes in use.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes `offset..offset + n`.
    ///
    /// # Safety
    /// `offset + n <= self.len()`, and nothing writes these bytes while the
    /// returned slice lives.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn bytes(&self, offset: usize, n: usize) -> &[u8] {
        debug_assert!(offset + n <= self.len);
        // SAFETY: in bounds of the allocation (the caller's promise), which
        // lives as long as `self`; initialized (zeroed at allocation); not
        // written meanwhile (the caller's promise).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>().add(offset), n) }
    }

    /// Bytes `offset..offset + n`, writable.
    ///
    /// # Safety
    /// `offset + n <= self.len()`, and nothing else reads or writes these
    /// bytes while the returned slice lives.
    #[allow(unsafe_code, clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, offset: usize, n: usize) -> &mut [u8] {
        debug_assert!(offset + n <= self.len);
        // SAFETY: in bounds and initialized as in `bytes`; the pointer comes
        // from `Box::into_raw`, so it may write; no other access overlaps
        // (the caller's promise).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<u8>().add(offset), n) }
    }
}

impl RowBlock {
    /// Copies row `row` (rows of `n` bytes) into `dst[j * n..]` for every
    /// `(j, row)` of `picks`: the sizes of a small row as fixed-size moves,
    /// and no slice of the block formed (other rows may be written
    /// meanwhile).
    ///
    /// # Panics
    /// If a row ends past the block or its place past `dst`.
    ///
    /// # Safety
    /// Nothing writes the rows copied during the call.
    #[allow(unsafe_code)]
    #[inline]
    pub(crate) unsafe fn copy_rows(
        &self,
        n: usize,
        picks: impl Iterator<Item = (usize, usize)>,
        dst: &mut [u8],
    ) {
        // SAFETY: the block's bytes are readable and the rows read are not
        // written meanwhile (the caller's promise); `dst` is writable and
        // another allocation (a `&mut`), accessed by nothing else.
        unsafe {
            move_rows(
                n,
                picks,
                (self.ptr.as_ptr().cast::<u8>(), self.len),
                (dst.as_mut_ptr(), dst.len()),
            );
        }
    }

    /// Copies row `rows[j]` (rows of `n` bytes) into `dst[j * n..]` for
    /// every `j`: [`RowBlock::copy_rows`] of `rows` in order, the rows
    /// checked by the caller, once for every column (a batch of a few envs'
    /// rows out of many costs a move per row and column, and little else).
    ///
    /// # Panics
    /// If `dst` holds fewer than `rows.len()` rows.
    ///
    /// # Safety
    /// Every row of `rows` is a row of the block (`row * n + n` at most its
    /// length), and nothing writes the rows copied during the call.
    #[allow(unsafe_code)]
    #[inline]
    pub(crate) unsafe fn gather_rows(&self, n: usize, rows: &[usize], dst: &mut [u8]) {
        // SAFETY: as in `copy_rows`; every row in the block (the caller's
        // promise).
        unsafe {
            gather_rows(
                n,
                rows,
                (self.ptr.as_ptr().cast::<u8>(), self.len),
                (dst.as_mut_ptr(), dst.len()),
            );
        }
    }

    /// Writes `src[from * n..]` into row `row` (rows of `n` bytes) for every
    /// `(row, from)` of `picks`: [`RowBlock::copy_rows`] the other way.
    ///
    /// # Panics
    /// If a row ends past the block or its source past `src`.
    ///
    /// # Safety
    /// Nothing else reads or writes the rows written during the call, and
    /// `src` is not in this block.
    #[allow(unsafe_code)]
    #[inline]
    unsafe fn write_rows(&self, n: usize, picks: impl Iterator<Item = (usize, usize)>, src: &[u8]) {
        // SAFETY: the block was allocated writable (`Box::into_raw`) and the
        // rows written are accessed by nothing else (the caller's
        // promise); `src` is readable, not written meanwhile (a shared
        // borrow) and not in the block (the caller's promise).
        unsafe {
            move_rows(
                n,
                picks,
                (src.as_ptr(), src.len()),
                (self.ptr.as_ptr().cast::<u8>(), self.len),
            );
        }
    }

    /// Writes `src[j * n..]` into row `picks[j].0` (rows of `n` bytes) for
    /// every `j` (each pick's source row is `j`: the caller checked it):
    /// [`RowBlock::gather_rows`] the other way, the rows checked by the
    /// caller, once for every column.
    ///
    /// # Panics
    /// If `src` holds fewer than `picks.len()` rows.
    ///
    /// # Safety
    /// Every row `picks[j].0` is a row of the block, nothing else reads or
    /// writes the rows written during the call, and `src` is not in this
    /// block.
    #[allow(unsafe_code)]
    #[inline]
    unsafe fn scatter_rows(&self, n: usize, picks: &[(usize, Option<usize>)], src: &[u8]) {
        if n == 0 {
            return;
        }
        assert!(
            picks.len() <= src.len() / n,
            "{} rows to write, from a source of {} bytes, {n} a row",
            picks.len(),
            src.len()
        );
        let moves = picks.iter().enumerate().map(|(from, &(to, _))| {
            debug_assert!(to < self.len / n);
            (to, from)
        });
        // SAFETY: every row inside the block (the caller's promise), every
        // source row (below `picks.len()`, a slice's length) inside `src`
        // (asserted above); the block was allocated writable
        // (`Box::into_raw`), its rows written are accessed by nothing else
        // and `src` is readable and not in the block (the caller's
        // promises).
        unsafe {
            move_unchecked(n, moves, src.as_ptr(), self.ptr.as_ptr().cast::<u8>());
        }
    }
}

/// Copies rows of `n` bytes from `src` (a pointer and its length in bytes)
/// to `dst`: row `from` to place `to` for every `(to, from)` of `picks`,
/// each checked against both sides: [`move_unchecked`].
///
/// # Panics
/// If a row ends past its side.
///
/// # Safety
/// `src` is readable for its length and not written during the call; `dst`
/// is writable for its length; the rows written are accessed by nothing
/// else during the call and do not overlap those read.
#[allow(unsafe_code)]
#[inline]
unsafe fn move_rows(
    n: usize,
    picks: impl Iterator<Item = (usize, usize)>,
    (src, len): (*const u8, usize),
    (dst, room): (*mut u8, usize),
) {
    if n == 0 {
        return;
    }
    // How many whole rows each side holds: one comparison a row below.
    let (rows_in_src, rows_in_dst) = (len / n, room / n);
    let checked = picks.inspect(|&(to, from)| {
        assert!(
            from < rows_in_src && to < rows_in_dst,
            "row {from} inside the source, its place {to} inside the destination"
        );
    });
    // SAFETY: every row in bounds of its side (just asserted); the rest is
    // the caller's promise.
    unsafe { move_unchecked(n, checked, src, dst) };
}

/// Copies row `rows[j]` (rows of `n` bytes) from `src` (a pointer and its
/// length) to place `j` of `dst`: [`move_rows`] of `rows` in order, with
/// one check of the room for all of them (the rows' own checked by the
/// caller, once for every column).
///
/// # Panics
/// If `dst` holds fewer than `rows.len()` rows.
///
/// # Safety
/// As [`move_rows`], and every row of `rows` ends inside `src`.
#[allow(unsafe_code)]
#[inline]
unsafe fn gather_rows(
    n: usize,
    rows: &[usize],
    (src, len): (*const u8, usize),
    (dst, room): (*mut u8, usize),
) {
    if n == 0 {
        return;
    }
    debug_assert!(rows.iter().all(|&row| row < len / n));
    assert!(
        rows.len() <= room / n,
        "{} rows, their places inside the destination",
        rows.len()
    );
    // SAFETY: every row inside the source (the caller's promise), every
    // place inside the destination (asserted above); the rest is the
    // caller's promise.
    unsafe { move_unchecked(n, rows.iter().copied().enumerate(), src, dst) };
}

/// Copies rows of `n` bytes (nonzero) from `src` to `dst`: row `from` to
/// place `to` for every `(to, from)` of `picks`, the sizes of a small row
/// as fixed-size moves.
///
/// # Safety
/// Every row and place is in bounds of its side; as [`move_rows`] for the
/// rest.
#[allow(unsafe_code)]
#[inline]
unsafe fn move_unchecked(
    n: usize,
    picks: impl Iterator<Item = (usize, usize)>,
    src: *const u8,
    dst: *mut u8,
) {
    /// `N` bytes a row (`N == 0`: `n`).
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn run<const N: usize>(
        n: usize,
        picks: impl Iterator<Item = (usize, usize)>,
        src: *const u8,
        dst: *mut u8,
    ) {
        let n = if N == 0 { n } else { N };
        for (to, from) in picks {
            // SAFETY: both ranges in bounds, not overlapping and not
            // otherwise accessed (the caller's promise).
            unsafe { std::ptr::copy_nonoverlapping(src.add(from * n), dst.add(to * n), n) };
        }
    }
    // SAFETY: the caller's promise, passed on.
    unsafe {
        match n {
            1 => run::<1>(n, picks, src, dst),
            2 => run::<2>(n, picks, src, dst),
            4 => run::<4>(n, picks, src, dst),
            8 => run::<8>(n, picks, src, dst),
            16 => run::<16>(n, picks, src, dst),
            _ => run::<0>(n, picks, src, dst),
        }
    }
}

impl Drop for RowBlock {
    fn drop(&mut self) {
        if self.keeper.is_some() {
            // Foreign bytes: the keeper, dropped next, owns them.
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: `ptr` and `words` are those of the box made in `zeroed`,
        // freed only here, once; no view outlives the block (each holds an
        // `Arc` of it).
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.words,
            ))
        });
    }
}

impl std::fmt::Debug for RowBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RowBlock({} bytes)", self.len)
    }
}

/// Bytes that the crate does not own, such as a mapping shared between
/// processes, lent out as tensors that view their ranges in place: how an
/// env in a worker process writes its result straight into the slot its
/// parent reads, and reads its action from where the parent wrote it.
///
/// A view is the only tensor that sees its bytes, as a row of a
/// [`LentRows`]: cloning, indexing or reshaping it copies them, and a
/// holder that replaces it (`set`) takes those bytes out of its tensordict
/// ([`SharedBlock::is_view`] tells).
///
/// ```
/// use std::ptr::NonNull;
/// use std::sync::{Arc, Mutex};
/// use tensordict::{DType, SharedBlock};
/// # fn main() -> Result<(), tensordict::TensorDictError> {
/// // Stands for a mapping: 8-byte aligned, alive while its keeper lives.
/// let memory = Arc::new(Mutex::new(vec![0u64; 2]));
/// let ptr = NonNull::new(memory.lock().unwrap().as_mut_ptr().cast::<u8>()).unwrap();
/// #[allow(unsafe_code)]
/// // SAFETY: 16 aligned bytes that `memory` keeps; nothing else touches
/// // them while the view is used, and the views do not overlap.
/// let (block, mut view) = unsafe {
///     let block = SharedBlock::new(ptr, 16, memory.clone());
///     let view = block.view(DType::F32, &[2], 8)?;
///     (block, view)
/// };
/// view.as_mut_slice::<f32>()?.copy_from_slice(&[1.5, 2.5]);
/// assert!(block.is_view(&view, 8));
/// assert!(!block.is_view(&view.clone(), 8), "a clone copies");
/// drop((view, block));
/// let word = memory.lock().unwrap()[1];
/// assert_eq!(word.to_ne_bytes()[..4], 1.5f32.to_ne_bytes());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SharedBlock(Arc<RowBlock>);

impl SharedBlock {
    /// The `len` bytes at `ptr`, kept alive by `keeper`.
    ///
    /// # Safety
    /// `ptr` is 8-byte aligned and its `len` bytes are initialized,
    /// readable and writable from any thread for as long as `keeper`
    /// lives; nothing reaches them through a reference while a view of the
    /// block lives, only through raw pointers or atomics.
    #[allow(unsafe_code)]
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, keeper: Arc<dyn Send + Sync>) -> SharedBlock {
        debug_assert!(ptr.as_ptr() as usize % 8 == 0, "8-byte aligned");
        SharedBlock(Arc::new(RowBlock {
            ptr: ptr.cast::<u64>(),
            words: len.div_ceil(8),
            len,
            keeper: Some(keeper),
        }))
    }

    /// The bytes the block spans.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the block spans no byte.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// A tensor of `dtype` and `shape` that views the bytes at `offset`
    /// in place.
    ///
    /// # Errors
    /// [`TensorDictError::ViewOutOfBlock`] if the bytes end past the block
    /// or `offset` is not a multiple of the dtype's size;
    /// [`TensorDictError::ShapeTooLarge`] if the shape's size overflows.
    ///
    /// # Safety
    /// While the view lives, no other view of the block overlaps its
    /// bytes; while they are read through it (a borrow of
    /// [`Tensor::as_bytes`] or a slice of it) nothing else writes them, and
    /// while they are written through it ([`Tensor::bytes_mut`]) nothing
    /// else reads or writes them, in this process or any other that maps
    /// them.
    #[allow(unsafe_code)]
    pub unsafe fn view(
        &self,
        dtype: DType,
        shape: &[usize],
        offset: usize,
    ) -> Result<Tensor, TensorDictError> {
        let nbytes = crate::tensor::checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| TensorDictError::ShapeTooLarge {
                shape: shape.to_vec(),
            })?;
        let fits = offset
            .checked_add(nbytes)
            .is_some_and(|end| end <= self.0.len());
        if !fits || offset % dtype.size() != 0 {
            return Err(TensorDictError::ViewOutOfBlock {
                dtype,
                offset,
                nbytes,
                len: self.0.len(),
            });
        }
        Ok(Tensor::row_view(dtype, shape, &self.0, offset, nbytes))
    }

    /// Whether `tensor` is this block's view at `offset`.
    #[inline]
    pub fn is_view(&self, tensor: &Tensor, offset: usize) -> bool {
        tensor.is_row_view(&self.0, offset)
    }
}

/// [`LentRows::is_view`] apart from its batch ([`LentRows::view_check`]):
/// shared by the rows' holders, it gives no access to the rows.
#[derive(Debug)]
pub struct ViewCheck(LentRows);

impl ViewCheck {
    /// Whether `view` is still row `row`'s view as lent
    /// ([`LentRows::is_view`]).
    #[inline]
    pub fn is_view(&self, row: usize, view: &TensorDict) -> bool {
        self.0.is_view(row, view)
    }
}

/// Where each tensor of one lent batch sits in another's
/// ([`LentRows::leaves_in`]).
#[derive(Clone, Debug)]
pub struct LeafMap(Vec<usize>);

/// One leaf of a lent batch.
#[derive(Clone, Debug)]
struct Column {
    /// Its key in the batch.
    key: NestedKey,
    block: Arc<RowBlock>,
    dtype: DType,
    /// The shape of one row.
    row_shape: Shape,
    /// The bytes of one row.
    row_bytes: usize,
}

/// A batch of tensors whose rows are lent out: [`LentRows::lend`] gives one
/// tensordict per row whose tensors are views of that row, written in place
/// by whoever holds it (one holder per row, on any thread), and keeps the
/// batch, whose rows its owner copies out ([`LentRows::gather`]) or writes
/// ([`LentRows::write_row`]) where no view is in use.
///
/// A view stays the only tensor that sees its row: cloning it, indexing it
/// or reshaping it copies the row, and so does cloning a tensordict of
/// views. A holder that replaces a tensor of its view (`set`) takes that
/// key out of the lent row: [`LentRows::is_view`] tells, and the row can be
/// written from it.
///
/// ```
/// use tensordict::{LentRows, Tensor, TensorDict};
/// # fn main() -> Result<(), tensordict::TensorDictError> {
/// let mut batch = TensorDict::new(&[2]);
/// batch.set("obs", Tensor::zeros(tensordict::DType::F32, &[2, 3]))?;
/// let (mut rows, mut views) = LentRows::lend(&batch).expect("tensors only");
/// // Each holder writes its row in place (here, one after the other).
/// for (row, view) in views.iter_mut().enumerate() {
///     view.tensor_mut("obs")?.as_mut_slice::<f32>()?.fill(row as f32);
///     assert!(rows.is_view(row, view));
/// }
/// // SAFETY: no view is in use while its row is copied out.
/// #[allow(unsafe_code)]
/// let out = unsafe { rows.gather(&[1, 0]) };
/// assert_eq!(out.tensor("obs")?.to_vec::<f32>()?, vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LentRows {
    rows: usize,
    /// The batch lent (its keys, nesting and batch sizes; its bytes are
    /// those at the time it was lent and are not read again).
    template: TensorDict,
    /// The batch's tensors, depth first in key order.
    columns: Vec<Column>,
    /// The storages of the last gathers, reused once their batches are
    /// dropped.
    recycled: Recycled,
    /// Whether the batch has no sub-dict: its tensors are its entries, in
    /// order (a quicker [`LentRows::is_view`]).
    flat: bool,
    /// Row `r`'s view was stamped `stamp_base + r` when made (unique to it
    /// among all lent rows: `NEXT_STAMP`); it keeps that stamp until an
    /// entry of it is replaced, added or removed (`Entries`).
    stamp_base: u64,
}

/// The stamp of the next lent row's view: one counter for the process, so
/// that no two views share a stamp (one lent to an env and swapped into
/// another's buffer is told apart). Zero is never a view's.
static NEXT_STAMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl LentRows {
    /// Lends the rows of `batch` (a copy of it): the lent batch and, per row,
    /// its view, a tensordict of `batch`'s keys and nesting whose tensors are
    /// that row, starting as `batch`'s values. `None` if `batch` has no
    /// batch dim or no row, or holds a non-tensor (at any depth).
    pub fn lend(batch: &TensorDict) -> Option<(LentRows, Vec<TensorDict>)> {
        let rows = *batch.batch_size().first()?;
        if rows == 0 {
            return None;
        }
        let mut columns = Vec::new();
        collect_columns(batch, rows, &NestedKey::default(), &mut columns)?;
        let lent = LentRows {
            rows,
            template: batch.clone(),
            columns,
            recycled: Recycled::default(),
            flat: batch
                .iter()
                .all(|(_, entry)| matches!(entry, Entry::Tensor(_))),
            // Relaxed: a unique number is all that is asked of it.
            stamp_base: NEXT_STAMP.fetch_add(rows as u64, std::sync::atomic::Ordering::Relaxed),
        };
        let views = (0..rows)
            .map(|row| {
                let mut view = lent.view(row);
                view.entries_mut().set_stamp(lent.stamp_of(row));
                view
            })
            .collect();
        Some((lent, views))
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `row`'s view (made once per row, by `lend`).
    fn view(&self, row: usize) -> TensorDict {
        let mut leaf = 0;
        build(
            &self.template,
            &mut |dtype, shape| {
                let column = &self.columns[leaf];
                leaf += 1;
                debug_assert!(column.dtype == dtype && same_shape(&column.row_shape, shape));
                Tensor::row_view(
                    column.dtype,
                    &column.row_shape,
                    &column.block,
                    row * column.row_bytes,
                    column.row_bytes,
                )
            },
            None,
        )
    }

    /// What tells whether a tensordict is still one of these rows' views
    /// ([`LentRows::is_view`]), apart from the batch: for a holder to check
    /// its own view without the owner's lock. It reaches none of the rows'
    /// bytes.
    pub fn view_check(&self) -> ViewCheck {
        ViewCheck(LentRows {
            rows: self.rows,
            template: self.template.clone(),
            columns: self.columns.clone(),
            recycled: Recycled::default(),
            flat: self.flat,
            stamp_base: self.stamp_base,
        })
    }

    /// The stamp of row `row`'s view (see `LentRows::stamp_base`).
    fn stamp_of(&self, row: usize) -> u64 {
        self.stamp_base + row as u64
    }

    /// Whether `view` is still row `row`'s view as lent: the same keys and
    /// nesting, every tensor the row's own (its holder replaced none). One
    /// comparison while no entry of it was replaced, added or removed
    /// since it was lent (its writes of tensors in place keep it so), else
    /// a pointer comparison per tensor.
    pub fn is_view(&self, row: usize, view: &TensorDict) -> bool {
        if row >= self.rows {
            return false;
        }
        // The view as made, nothing replaced since: one comparison (a
        // view's stamp is never zero, see `Entries`).
        view.entries().stamp() == self.stamp_of(row) || self.is_view_walk(row, view)
    }

    /// [`LentRows::is_view`] by walking the view: a pointer comparison per
    /// tensor (`row` in range).
    fn is_view_walk(&self, row: usize, view: &TensorDict) -> bool {
        if self.flat {
            // Entry `i` is column `i`.
            // Slices zipped: one bounds check for the loop, not per entry.
            let entries = view.entries().as_slice();
            return entries.len() == self.columns.len()
                && entries
                    .iter()
                    .zip(self.template.entries().as_slice())
                    .zip(&self.columns)
                    .all(|(((name, entry), (key, _)), column)| {
                        matches!(entry, Entry::Tensor(t) if t.is_row_view(&column.block, row * column.row_bytes))
                            && same_name(name, key)
                    });
        }
        let mut leaf = 0;
        is_view_at(&self.template, view, &self.columns, row, &mut leaf)
    }

    /// Rows `rows` (in that order, repeats allowed) as a new batch of
    /// batch size `[rows.len(), ..]`, its tensors side by side in one
    /// storage of their own (that of a batch of an earlier gather when its
    /// receiver has dropped all of it).
    ///
    /// # Panics
    /// If a row is out of range.
    ///
    /// # Safety
    /// No view of these rows is in use during the call: their holders
    /// neither write nor read them, and their last writes happen before it
    /// (a lock that both take, for example).
    #[allow(unsafe_code)]
    pub unsafe fn gather(&mut self, rows: &[usize]) -> TensorDict {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.gather_impl(rows, None) }
    }

    /// Where each tensor of this batch sits in `other`'s (the same key,
    /// dtype and row shape), for [`LentRows::gather_or`]: `None` unless
    /// `other` has as many rows and every key of this batch. Made once.
    pub fn leaves_in(&self, other: &LentRows) -> Option<LeafMap> {
        if other.rows != self.rows {
            return None;
        }
        let map = self
            .columns
            .iter()
            .map(|column| {
                let at = other.columns.iter().position(|c| c.key == column.key)?;
                let found = &other.columns[at];
                (found.dtype == column.dtype && same_shape(&found.row_shape, &column.row_shape))
                    .then_some(at)
            })
            .collect::<Option<Vec<usize>>>()?;
        Some(LeafMap(map))
    }

    /// As [`LentRows::gather`], but row `rows[j]` taken from `other`'s
    /// same row, for its keys of this batch, wherever `instead[j]`: the
    /// roots of a pool's envs whose root is their step's result, which
    /// sits in the other batch. `map` is [`LentRows::leaves_in`]`(other)`.
    ///
    /// # Panics
    /// If a row is out of range, or `instead` is not as long as `rows`.
    ///
    /// # Safety
    /// As for [`LentRows::gather`], in both batches: no view of the rows
    /// read (here or in `other`) is in use.
    #[allow(unsafe_code)]
    pub unsafe fn gather_or(
        &mut self,
        rows: &[usize],
        instead: &[bool],
        other: &LentRows,
        map: &LeafMap,
    ) -> TensorDict {
        assert_eq!(instead.len(), rows.len(), "one flag per row");
        assert_eq!(
            map.0.len(),
            self.columns.len(),
            "the map of this batch's tensors"
        );
        // What the copies out of `other` rely on, whatever batch the map
        // was made from: as many rows, and each mapped tensor's rows as
        // long as this batch's.
        assert_eq!(other.rows, self.rows, "the other batch's rows");
        assert!(
            map.0.iter().zip(&self.columns).all(|(&at, column)| other
                .columns
                .get(at)
                .is_some_and(|found| found.row_bytes == column.row_bytes)),
            "a map of this batch's tensors into the other's"
        );
        // SAFETY: the caller's promise, passed on.
        unsafe { self.gather_impl(rows, Some((instead, other, map))) }
    }

    /// [`LentRows::gather`] and [`LentRows::gather_or`].
    ///
    /// # Safety
    /// As for [`LentRows::gather_or`].
    #[allow(unsafe_code)]
    unsafe fn gather_impl(
        &mut self,
        rows: &[usize],
        or: Option<(&[bool], &LentRows, &LeafMap)>,
    ) -> TensorDict {
        // One pass: whether the rows are a run of consecutive ones in range
        // (every row in order, or half of them as an async receive of
        // half the envs often takes: one copy a column), else another:
        // every row in range. (Folded without a branch per row.)
        let first = rows.first().copied().unwrap_or(0);
        let run = first.saturating_add(rows.len()) <= self.rows
            && rows
                .iter()
                .enumerate()
                .fold(true, |all, (j, &row)| all & (row == first + j));
        assert!(
            run || rows.iter().fold(true, |all, &row| all & (row < self.rows)),
            "a row out of range"
        );
        let from_other = |j: usize| or.is_some_and(|(instead, ..)| instead[j]);
        let others = or.map_or(0, |(instead, ..)| instead.iter().filter(|&&b| b).count());
        // For a run of rows: one copy of each column from the batch most
        // rows come from, then the other rows one by one; otherwise each
        // row from its batch.
        let bulk_other = others * 2 > rows.len();
        let mixed = others != 0 && others != rows.len();
        // The rows each batch gives, `(j, row)`, found in one pass for all
        // columns: `picks[0]` this batch's, `picks[1]` the other's; for
        // a run of rows, only those not from the bulk's batch.
        let mut picks: [SmallVec<[(usize, usize); 16]>; 2] = Default::default();
        if mixed {
            for (j, &row) in rows.iter().enumerate() {
                let other = from_other(j);
                if !run || other != bulk_other {
                    picks[usize::from(other)].push((j, row));
                }
            }
        }
        // One storage for the batch's tensors: one allocation per gather
        // (none once a dropped batch's storage comes back).
        let (columns, count) = (&self.columns, rows.len());
        let total = columns
            .iter()
            .map(|column| (count * column.row_bytes).next_multiple_of(8))
            .sum();
        let packed = Tensor::packed(total, &mut self.recycled, |bytes| {
            let mut at = 0;
            for (leaf, column) in columns.iter().enumerate() {
                let n = column.row_bytes;
                let bytes = &mut bytes[at..at + count * n];
                at += (count * n).next_multiple_of(8);
                let block_of = |other: bool| match or {
                    Some((_, batch, map)) if other => &batch.columns[map.0[leaf]].block,
                    _ => &column.block,
                };
                // In every block below the rows are in range of both batches
                // (asserted above, and in `gather_or`: the other batch has as
                // many rows, and its mapped tensor `n` bytes a row) and not in
                // use (the caller's promise).
                if run {
                    // SAFETY: as above, for the run's rows.
                    let all = unsafe { block_of(bulk_other).bytes(first * n, count * n) };
                    bytes.copy_from_slice(all);
                    if mixed {
                        let strays = picks[usize::from(!bulk_other)].iter().copied();
                        // SAFETY: as above.
                        unsafe { block_of(!bulk_other).copy_rows(n, strays, bytes) };
                    }
                } else if !mixed {
                    // Every row from one batch (this one, or `other` for all).
                    // SAFETY: as above.
                    unsafe { block_of(others != 0).gather_rows(n, rows, bytes) };
                } else {
                    // SAFETY: as above.
                    unsafe { block_of(false).copy_rows(n, picks[0].iter().copied(), bytes) };
                    // SAFETY: as above.
                    unsafe { block_of(true).copy_rows(n, picks[1].iter().copied(), bytes) };
                }
            }
        });
        // The tensors, made as the template is walked (depth first in key
        // order: the columns' order), each at its offset of the storage.
        let (mut leaf, mut at) = (0, 0);
        build(
            &self.template,
            &mut |dtype, row_shape| {
                let column = &columns[leaf];
                // The walk meets the columns in their order.
                debug_assert!(
                    column.dtype == dtype && column.row_shape.as_slice() == row_shape,
                    "column {leaf} out of the template's order"
                );
                let nbytes = count * column.row_bytes;
                let tensor = Tensor::in_packed(
                    column.dtype,
                    shape_with_first(count, &column.row_shape),
                    at,
                    nbytes,
                    &packed,
                );
                (leaf, at) = (leaf + 1, at + nbytes.next_multiple_of(8));
                tensor
            },
            Some(count),
        )
    }

    /// Writes `src` (a row: this batch's keys, dtypes and row shapes) into
    /// row `row`: for a holder whose view no longer is one ([`LentRows::is_view`]:
    /// it replaced a tensor; the tensors of `src` that still view the row
    /// are in place and left as they are). An error names the first key
    /// that differs; the row may then be partly written.
    ///
    /// # Panics
    /// If `row` is out of range.
    ///
    /// # Safety
    /// No view of row `row` is in use during the call, as for
    /// [`LentRows::gather`], except through `src` itself (which the call
    /// only reads).
    #[allow(unsafe_code)]
    pub unsafe fn write_row(&self, row: usize, src: &TensorDict) -> Result<(), TensorDictError> {
        assert!(row < self.rows, "row {row} out of range");
        let mut leaf = 0;
        write_at(
            &self.template,
            src,
            &self.columns,
            row,
            &mut leaf,
            &NestedKey::default(),
        )
    }
    /// Writes rows of `src` into this batch's, for this batch's keys (`src`
    /// may have more): for every `(row, from)` of `picks`, row `from` of
    /// `src` (each tensor's first dim) into row `row`, or, for `from` of
    /// `None`, `src` itself as the row. A batch's inputs written straight
    /// into the rows that its envs read: one copy of each column when
    /// `picks` is every row in order, from as many rows or more. An error names the
    /// first key that `src` lacks or holds with another dtype or shape, or
    /// a row past its first dim; the rows may then be partly written.
    ///
    /// # Panics
    /// If a `row` is out of range.
    ///
    /// # Safety
    /// No view of the rows written is in use during the call, as for
    /// [`LentRows::gather`].
    #[allow(unsafe_code)]
    pub unsafe fn write_rows_from(
        &self,
        src: &TensorDict,
        picks: &[(usize, Option<usize>)],
    ) -> Result<(), TensorDictError> {
        let every = picks.len() == self.rows
            && picks
                .iter()
                .enumerate()
                .fold(true, |all, (j, &(row, from))| {
                    all & (row == j) & (from == Some(j))
                });
        if every {
            // SAFETY: the caller's promise, for every row.
            return unsafe { self.write_from(src, None) };
        }
        assert!(
            picks
                .iter()
                .fold(true, |all, &(row, _)| all & (row < self.rows)),
            "a row out of range"
        );
        // SAFETY: the caller's promise.
        unsafe { self.write_from(src, Some(picks)) }
    }

    /// [`LentRows::write_rows_from`] of every row in order: row `j` from
    /// row `j` of `src` (which may have more), for every `j`, one copy of
    /// each column, without a look at each row.
    ///
    /// # Safety
    /// No view of any row is in use during the call, as for
    /// [`LentRows::gather`].
    #[allow(unsafe_code)]
    pub unsafe fn write_every_row_from(&self, src: &TensorDict) -> Result<(), TensorDictError> {
        // SAFETY: the caller's promise.
        unsafe { self.write_from(src, None) }
    }

    /// [`LentRows::write_rows_from`] of `picks` (each row in range), or of
    /// every row in order for `None`.
    ///
    /// # Safety
    /// As [`LentRows::write_rows_from`].
    #[allow(unsafe_code)]
    unsafe fn write_from(
        &self,
        src: &TensorDict,
        picks: Option<&[(usize, Option<usize>)]>,
    ) -> Result<(), TensorDictError> {
        // The number of rows written, and pick `i`.
        let count = picks.map_or(self.rows, <[_]>::len);
        let pick = |i: usize| picks.map_or((i, Some(i)), |picks| picks[i]);
        // Whether row `j` comes from row `j` of `src`, for every `j` (a
        // send of a batch to some envs): then a column of `src` fits when
        // its last row does, and its rows are moved with one check.
        let in_order = picks.is_none_or(|picks| {
            picks
                .iter()
                .enumerate()
                .fold(true, |all, (j, &(_, from))| all & (from == Some(j)))
        });
        for column in &self.columns {
            let t = match src.get(&column.key) {
                Some(Entry::Tensor(t)) => t,
                Some(other) => {
                    return Err(row_mismatch(
                        column.key.clone(),
                        if count == 0 { 0 } else { pick(0).0 },
                        format!("is a {} but the batch holds a tensor", other.kind()),
                    ))
                }
                None => {
                    return Err(TensorDictError::KeyNotFound {
                        key: column.key.clone(),
                        available: src.iter().map(|(k, _)| k.to_owned()).collect(),
                    })
                }
            };
            let shape = t.shape();
            // The rows `src` has, if its tensor is a batch of this column's
            // rows; whether it is one row.
            let src_rows = shape
                .split_first()
                .filter(|(_, rest)| same_shape(rest, &column.row_shape))
                .map(|(&rows, _)| rows);
            let is_row = same_shape(shape, &column.row_shape);
            let fits = |from: Option<usize>| match from {
                Some(from) => src_rows.is_some_and(|rows| from < rows),
                None => is_row,
            };
            // Rows read in order fit when the last one does (one check, not
            // one per row).
            let all_fit = in_order
                && t.dtype() == column.dtype
                && count.checked_sub(1).is_none_or(|last| fits(Some(last)));
            let misfit = if all_fit {
                None
            } else {
                (0..count)
                    .map(pick)
                    .find(|&(_, from)| t.dtype() != column.dtype || !fits(from))
            };
            if let Some((row, from)) = misfit {
                return Err(row_mismatch(
                    column.key.clone(),
                    row,
                    format!(
                        "has shape {:?} and dtype {} (read {}) but the batch rows have shape {:?} and dtype {}",
                        shape,
                        t.dtype(),
                        from.map_or_else(|| "whole".to_owned(), |from| format!("at row {from}")),
                        column.row_shape,
                        column.dtype
                    ),
                ));
            }
            // A source in this very block (a view of one of its rows) is
            // copied out first: its bytes may be among those written.
            let own;
            let bytes = if t.is_in_block(&column.block) {
                own = t.as_bytes().to_vec();
                &own[..]
            } else {
                t.as_bytes()
            };
            let n = column.row_bytes;
            match picks {
                // SAFETY: every row is in range, and none is in use (the
                // caller's promise); `bytes` is not in the block (copied
                // out above if it was) and has at least as many rows (they
                // all fit): its first ones are read.
                None => unsafe { column.block.bytes_mut(0, self.rows * n) }
                    .copy_from_slice(&bytes[..self.rows * n]),
                // SAFETY: the rows written are in range (asserted), and not
                // in use (the caller's promise); `bytes` is not in the block.
                Some(picks) if in_order => unsafe { column.block.scatter_rows(n, picks, bytes) },
                Some(picks) => {
                    let picks = picks.iter().map(|&(row, from)| (row, from.unwrap_or(0)));
                    // SAFETY: as above.
                    unsafe { column.block.write_rows(n, picks, bytes) };
                }
            }
        }
        Ok(())
    }
}

/// The columns of `batch`'s tensors (under `prefix`), depth first in key
/// order; `None` at a non-tensor.
fn collect_columns(
    batch: &TensorDict,
    rows: usize,
    prefix: &NestedKey,
    columns: &mut Vec<Column>,
) -> Option<()> {
    for (name, entry) in batch.entries().iter() {
        match entry {
            Entry::Tensor(t) => {
                let block = RowBlock::zeroed(t.nbytes());
                #[allow(unsafe_code)]
                // SAFETY: the block was just made: no view of it exists.
                unsafe { block.bytes_mut(0, t.nbytes()) }.copy_from_slice(t.as_bytes());
                columns.push(Column {
                    key: prefix.child(name),
                    block: Arc::new(block),
                    dtype: t.dtype(),
                    row_shape: Shape::from_slice(&t.shape()[1..]),
                    row_bytes: t.nbytes() / rows,
                });
            }
            Entry::Dict(sub) => collect_columns(sub, rows, &prefix.child(name), columns)?,
            Entry::NonTensor(_) => return None,
        }
    }
    Some(())
}

/// A tensordict shaped as `template` (a batch of `[rows, ..]`), its
/// tensors made by `leaf(dtype, row shape)` depth first in key order: of
/// batch size `[len, ..]` with `Some(len)`, one row's (the template's
/// without its first dim) with `None`.
fn build(
    template: &TensorDict,
    leaf: &mut dyn FnMut(DType, &[usize]) -> Tensor,
    len: Option<usize>,
) -> TensorDict {
    let rest = &template.batch_size()[1..];
    let batch: Shape = match len {
        Some(len) => std::iter::once(len).chain(rest.iter().copied()).collect(),
        None => Shape::from_slice(rest),
    };
    let mut entries = Entries::with_capacity(template.len());
    for (name, entry) in template.entries().iter() {
        let entry = match entry {
            Entry::Tensor(t) => Entry::Tensor(leaf(t.dtype(), &t.shape()[1..])),
            Entry::Dict(sub) => Entry::Dict(build(sub, leaf, len)),
            Entry::NonTensor(_) => unreachable!("a lent batch holds tensors only"),
        };
        entries.push_sorted(name.clone(), entry);
    }
    TensorDict::from_entries(batch, entries)
}

/// [`LentRows::is_view`] at one level.
fn is_view_at(
    template: &TensorDict,
    view: &TensorDict,
    columns: &[Column],
    row: usize,
    leaf: &mut usize,
) -> bool {
    if view.len() != template.len() {
        return false;
    }
    for position in 0..template.len() {
        let (name, entry) = template.entries().at_named(position);
        let (view_name, view_entry) = view.entries().at_named(position);
        if !same_name(name, view_name) {
            return false;
        }
        match (entry, view_entry) {
            (Entry::Tensor(_), Entry::Tensor(t)) => {
                let column = &columns[*leaf];
                *leaf += 1;
                if !t.is_row_view(&column.block, row * column.row_bytes) {
                    return false;
                }
            }
            (Entry::Dict(sub), Entry::Dict(view_sub)) => {
                if !is_view_at(sub, view_sub, columns, row, leaf) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// [`LentRows::write_row`] at one level.
fn write_at(
    template: &TensorDict,
    src: &TensorDict,
    columns: &[Column],
    row: usize,
    leaf: &mut usize,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    let mismatch = |key: NestedKey, reason: String| row_mismatch(key, row, reason);
    if !same_shape(&template.batch_size()[1..], src.batch_size()) {
        return Err(TensorDictError::StackBatchSize {
            index: row,
            expected: template.batch_size()[1..].to_vec(),
            found: src.batch_size().to_vec(),
        });
    }
    if let Some(extra) = src
        .entries()
        .keys()
        .find(|key| template.entries().get(key).is_none())
    {
        return Err(mismatch(
            prefix.child(extra),
            "has this key but the batch does not".into(),
        ));
    }
    for (name, entry) in template.entries().iter() {
        let key = || prefix.child(name);
        let Some(found) = src.entries().get(name) else {
            return Err(mismatch(key(), "is missing from the row".into()));
        };
        match (entry, found) {
            (Entry::Tensor(_), Entry::Tensor(t)) => {
                let column = &columns[*leaf];
                *leaf += 1;
                if t.dtype() != column.dtype || !same_shape(t.shape(), &column.row_shape) {
                    return Err(mismatch(
                        key(),
                        format!(
                            "has shape {:?} and dtype {} but the batch rows have shape {:?} and dtype {}",
                            t.shape(),
                            t.dtype(),
                            column.row_shape,
                            column.dtype
                        ),
                    ));
                }
                let n = column.row_bytes;
                if t.is_row_view(&column.block, row * n) {
                    // Already in place (and its bytes must not be both
                    // read and written here).
                    continue;
                }
                #[allow(unsafe_code)]
                // SAFETY: `row` is in range (asserted by `write_row`), no
                // view of it is in use (the caller's promise), and `t` is
                // not this row's view of this leaf (just checked): it views
                // other bytes, which this write does not touch.
                unsafe { column.block.bytes_mut(row * n, n) }.copy_from_slice(t.as_bytes());
            }
            (Entry::Dict(sub), Entry::Dict(src_sub)) => {
                write_at(sub, src_sub, columns, row, leaf, &key())?;
            }
            (entry, other) => {
                return Err(mismatch(
                    key(),
                    format!(
                        "is a {} but the batch holds a {}",
                        other.kind(),
                        entry.kind()
                    ),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of two rows with a sub-dict, lent: its rows and views.
    fn lent_pair() -> (LentRows, Vec<TensorDict>) {
        let mut batch = TensorDict::new(&[2]);
        batch
            .set("obs", Tensor::zeros(DType::F32, &[2, 3]))
            .unwrap();
        batch
            .set("done", Tensor::zeros(DType::Bool, &[2, 1]))
            .unwrap();
        batch
            .set(("sub", "x"), Tensor::zeros(DType::I64, &[2, 1]))
            .unwrap();
        LentRows::lend(&batch).unwrap()
    }

    /// A view's stamp answers `is_view` as the walk does: kept by writes
    /// of its tensors in place, lost by anything that could replace one
    /// (then the walk answers, still a view if nothing was replaced).
    #[test]
    fn a_view_keeps_its_stamp_until_an_entry_may_have_been_replaced() {
        type Change = fn(&mut Vec<TensorDict>);
        let in_place: [(&str, Change); 3] = [
            ("tensor_mut", |v| {
                v[0].tensor_mut("obs")
                    .unwrap()
                    .as_mut_slice::<f32>()
                    .unwrap()
                    .fill(1.0);
            }),
            ("tensor_mut of a sub-dict's tensor", |v| {
                v[0].tensor_mut(("sub", "x"))
                    .unwrap()
                    .as_mut_slice::<i64>()
                    .unwrap()[0] = 7;
            }),
            ("tensor_mut_by", |v| {
                let mut done = crate::Lookup::new("done");
                v[0].tensor_mut_by(&mut done)
                    .unwrap()
                    .as_mut_slice::<bool>()
                    .unwrap()[0] = true;
            }),
        ];
        for (what, change) in in_place {
            let (rows, mut views) = lent_pair();
            change(&mut views);
            assert_eq!(views[0].entries().stamp(), rows.stamp_of(0), "{what}");
            assert!(
                rows.is_view(0, &views[0]) && rows.is_view_walk(0, &views[0]),
                "{what}"
            );
        }
        // (what, whether row 0's buffer is still its view after it)
        let changes: [(&str, bool, Change); 9] = [
            ("set of a key it has", false, |v| {
                v[0].set("obs", Tensor::zeros(DType::F32, &[3])).unwrap();
            }),
            ("set in a sub-dict", false, |v| {
                v[0].set(("sub", "x"), Tensor::zeros(DType::I64, &[1]))
                    .unwrap();
            }),
            ("a key added", false, |v| {
                v[0].set("extra", Tensor::zeros(DType::U8, &[1])).unwrap();
            }),
            ("a key removed", false, |v| {
                v[0].remove("done");
            }),
            ("a tensor replaced through tensors_mut", false, |v| {
                *v[0].tensors_mut()[0] = Tensor::zeros(DType::Bool, &[1]);
            }),
            ("swapped with another row's view", false, |v| v.swap(0, 1)),
            ("a clone", false, |v| v[0] = v[0].clone()),
            ("tensors_mut, nothing replaced", true, |v| {
                let _ = v[0].tensors_mut();
            }),
            ("fill_from (a copy in place)", true, |v| {
                let copy = v[1].clone();
                v[0].fill_from(&copy).unwrap();
            }),
        ];
        for (what, still_a_view, change) in changes {
            let (rows, mut views) = lent_pair();
            change(&mut views);
            assert_ne!(views[0].entries().stamp(), rows.stamp_of(0), "{what}");
            assert_eq!(rows.is_view(0, &views[0]), still_a_view, "{what}");
            assert_eq!(rows.is_view_walk(0, &views[0]), still_a_view, "{what}");
        }
        // Two lendings never share a stamp.
        let ((a, _), (b, _)) = (lent_pair(), lent_pair());
        assert!(a.stamp_of(1) < b.stamp_of(0) || b.stamp_of(1) < a.stamp_of(0));
    }

    /// A shared block over a vector of `words` words that the block keeps.
    fn shared_block(words: usize) -> SharedBlock {
        let memory = Arc::new(std::sync::Mutex::new(vec![0u64; words]));
        let ptr = NonNull::new(memory.lock().unwrap().as_mut_ptr().cast::<u8>()).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: the vector's aligned bytes, kept by the block; nothing
        // else reaches them.
        unsafe {
            SharedBlock::new(ptr, 8 * words, memory)
        }
    }

    #[test]
    fn a_shared_view_outside_its_block_or_misaligned_is_an_error() {
        let block = shared_block(2);
        assert_eq!(block.len(), 16);
        #[allow(unsafe_code)]
        // SAFETY: each view is dropped at once; none overlaps another alive.
        unsafe {
            assert!(block.view(DType::F32, &[4], 0).is_ok());
            let err = block.view(DType::F32, &[4], 4).unwrap_err();
            assert_eq!(
                err,
                TensorDictError::ViewOutOfBlock {
                    dtype: DType::F32,
                    offset: 4,
                    nbytes: 16,
                    len: 16
                }
            );
            assert!(err.to_string().contains("offset 4"), "{err}");
            let err = block.view(DType::F64, &[1], 4).unwrap_err();
            assert!(matches!(
                err,
                TensorDictError::ViewOutOfBlock { offset: 4, .. }
            ));
            let err = block.view(DType::U8, &[usize::MAX, 2], 0).unwrap_err();
            assert!(matches!(err, TensorDictError::ShapeTooLarge { .. }));
        }
    }

    /// A view writes its bytes in place, sees what is there, and stays the
    /// one tensor of them: a clone or an index copies.
    #[test]
    fn a_shared_view_writes_in_place_and_copies_when_cloned() {
        let block = shared_block(2);
        #[allow(unsafe_code)]
        // SAFETY: two views of disjoint bytes; nothing else reaches them.
        let (mut a, mut b) = unsafe {
            (
                block.view(DType::I32, &[2], 0).unwrap(),
                block.view(DType::I32, &[2], 8).unwrap(),
            )
        };
        a.as_mut_slice::<i32>().unwrap().copy_from_slice(&[1, 2]);
        b.as_mut_slice::<i32>().unwrap().copy_from_slice(&[3, 4]);
        assert!(block.is_view(&a, 0) && block.is_view(&b, 8) && !block.is_view(&a, 8));
        let copy = a.clone();
        a.as_mut_slice::<i32>().unwrap()[0] = 9;
        assert_eq!(copy.to_vec::<i32>().unwrap(), vec![1, 2]);
        assert!(!block.is_view(&copy, 0));
        assert_eq!(a.index(0).unwrap().item::<i32>().unwrap(), 9);
        // A second view of the same bytes (after the first is gone) sees
        // the first's writes.
        drop(a);
        #[allow(unsafe_code)]
        // SAFETY: the view of these bytes was dropped.
        let again = unsafe { block.view(DType::I32, &[2], 0).unwrap() };
        assert_eq!(again.to_vec::<i32>().unwrap(), vec![9, 2]);
        // The memory outlives the block while a view holds it.
        drop(block);
        assert_eq!(b.to_vec::<i32>().unwrap(), vec![3, 4]);
    }

    fn batch(rows: usize) -> TensorDict {
        let mut td = TensorDict::new(&[rows]);
        td.set("obs", Tensor::zeros(DType::F32, &[rows, 3]))
            .unwrap();
        td.set(("info", "done"), Tensor::zeros(DType::Bool, &[rows]))
            .unwrap();
        td
    }

    fn write(view: &mut TensorDict, value: f32) {
        view.tensor_mut("obs")
            .unwrap()
            .as_mut_slice::<f32>()
            .unwrap()
            .fill(value);
        view.tensor_mut(("info", "done"))
            .unwrap()
            .as_mut_slice::<bool>()
            .unwrap()[0] = value > 1.0;
    }

    /// Every holder writes its own row from its own thread, round after
    /// round; between rounds the batch's copy holds every row's last write.
    #[allow(unsafe_code)]
    #[test]
    fn views_written_from_many_threads_land_in_their_rows() {
        let (mut rows, views) = LentRows::lend(&batch(8)).unwrap();
        let mut views: Vec<std::sync::Mutex<TensorDict>> =
            views.into_iter().map(std::sync::Mutex::new).collect();
        for round in 0..50 {
            std::thread::scope(|scope| {
                for (row, view) in views.iter_mut().enumerate() {
                    scope.spawn(move || write(view.get_mut().unwrap(), (round * 8 + row) as f32));
                }
            });
            // SAFETY: every writer has ended (the scope joined them).
            let out = unsafe { rows.gather(&(0..8).collect::<Vec<_>>()) };
            let obs = out.tensor("obs").unwrap().to_vec::<f32>().unwrap();
            for row in 0..8 {
                assert_eq!(obs[3 * row..3 * row + 3], [(round * 8 + row) as f32; 3]);
            }
        }
    }

    /// Rows that no view is writing are copied out while other threads
    /// write theirs: the copies hold what those rows hold, whatever the
    /// writers do to the rows beside them.
    #[allow(unsafe_code)]
    #[test]
    fn rows_are_copied_out_while_others_are_written() {
        let (mut rows, views) = LentRows::lend(&batch(8)).unwrap();
        let (mut busy, mut idle): (Vec<_>, Vec<_>) = views
            .into_iter()
            .enumerate()
            .partition(|(row, _)| row % 2 == 0);
        for (row, view) in &mut idle {
            write(view, 100.0 + *row as f32);
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (row, view) in &mut busy {
                let stop = &stop;
                scope.spawn(move || {
                    let mut round = 0u32;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        write(view, (round % 7) as f32 + *row as f32);
                        round += 1;
                    }
                });
            }
            let idle_rows: Vec<usize> = idle.iter().map(|(row, _)| *row).collect();
            for _ in 0..2000 {
                // SAFETY: no view of the odd rows is in use (their holders,
                // `idle`, are not touched meanwhile).
                let out = unsafe { rows.gather(&idle_rows) };
                let obs = out.tensor("obs").unwrap().to_vec::<f32>().unwrap();
                for (j, &row) in idle_rows.iter().enumerate() {
                    assert_eq!(obs[3 * j..3 * j + 3], [100.0 + row as f32; 3]);
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    /// A gather of any rows, in any order, of leaves of every row size
    /// (one byte, the fixed sizes, others) holds each row's values in its
    /// place, as the rows' own views hold them.
    #[allow(unsafe_code)]
    #[test]
    fn a_gather_of_any_rows_holds_their_values() {
        use proptest::prelude::*;
        let mut batch = TensorDict::new(&[6]);
        let leaves: [(&str, DType, &[usize]); 6] = [
            ("flag", DType::Bool, &[6, 1]),
            ("half", DType::I16, &[6, 1]),
            ("reward", DType::F32, &[6, 1]),
            ("obs", DType::F32, &[6, 3]),
            ("big", DType::F64, &[6, 2]),
            ("wide", DType::U8, &[6, 40]),
        ];
        for (key, dtype, shape) in leaves {
            batch.set(key, Tensor::zeros(dtype, shape)).unwrap();
        }
        let (rows, mut views) = LentRows::lend(&batch).unwrap();
        // `proptest!`'s body is a `Fn`.
        let rows = std::cell::RefCell::new(rows);
        for (row, view) in views.iter_mut().enumerate() {
            for (key, ..) in leaves {
                let mut t = view.tensor_mut(key).unwrap();
                let bytes = t.bytes_mut();
                let n = bytes.len();
                for (i, byte) in bytes.iter_mut().enumerate() {
                    // Bools hold 0 or 1; every other byte tells its row.
                    *byte = if n == 1 {
                        (row % 2) as u8
                    } else {
                        (row * 50 + i) as u8
                    };
                }
            }
        }
        proptest!(|(picked in proptest::collection::vec(0usize..6, 1..10))| {
            // SAFETY: no view is in use during the gather.
            let out = unsafe { rows.borrow_mut().gather(&picked) };
            for (key, ..) in leaves {
                let got = out.tensor(key).unwrap();
                let n = got.nbytes() / picked.len();
                for (j, &row) in picked.iter().enumerate() {
                    let want = views[row].tensor(key).unwrap().as_bytes().to_vec();
                    prop_assert_eq!(&got.as_bytes()[j * n..(j + 1) * n], &want[..], "{} row {}", key, row);
                }
            }
        });
    }

    /// Rows written from a batch, its rows in order or any of them, land
    /// in the rows named, each with its source row's values; the others
    /// keep theirs.
    #[allow(unsafe_code)]
    #[test]
    fn rows_written_from_any_rows_of_a_batch_land_in_theirs() {
        use proptest::prelude::*;
        let shapes: [(&str, DType, usize); 3] = [
            ("flag", DType::Bool, 1),
            ("action", DType::I64, 1),
            ("obs", DType::F32, 3),
        ];
        let batch_of = |rows: usize, base: usize| {
            let mut td = TensorDict::new(&[rows]);
            for (key, dtype, width) in shapes {
                let mut t = Tensor::zeros(dtype, &[rows, width]);
                let n = t.nbytes() / rows.max(1);
                for (i, byte) in t.bytes_mut().iter_mut().enumerate() {
                    let row = i / n.max(1);
                    *byte = if dtype == DType::Bool {
                        ((row + base) % 2) as u8
                    } else {
                        (base + i) as u8
                    };
                }
                td.set(key, t).unwrap();
            }
            td
        };
        let (rows, views) = LentRows::lend(&batch_of(8, 0)).unwrap();
        let rows = std::cell::RefCell::new(rows);
        proptest!(|(
            targets in proptest::sample::subsequence((0..8usize).collect::<Vec<_>>(), 0..8),
            shuffle in any::<u64>(),
            in_order in any::<bool>(),
        )| {
            let src = batch_of(8, 100);
            let mut targets = targets;
            // Any order of the rows written.
            let len = targets.len();
            for i in (1..len).rev() {
                targets.swap(i, (shuffle as usize).wrapping_mul(i + 7) % (i + 1));
            }
            let picks: Vec<(usize, Option<usize>)> = targets
                .iter()
                .enumerate()
                .map(|(j, &row)| (row, Some(if in_order { j } else { (j * 5 + 3) % 8 })))
                .collect();
            let bytes_of = |td: &TensorDict, key: &str| td.tensor(key).unwrap().as_bytes().to_vec();
            let before: Vec<Vec<Vec<u8>>> = views
                .iter()
                .map(|view| shapes.iter().map(|&(key, ..)| bytes_of(view, key)).collect())
                .collect();
            // SAFETY: no view is in use (one thread).
            unsafe { rows.borrow().write_rows_from(&src, &picks) }.unwrap();
            for row in 0..8 {
                let from = picks.iter().find(|&&(to, _)| to == row).map(|&(_, from)| from.unwrap());
                for (k, (key, ..)) in shapes.into_iter().enumerate() {
                    let got = bytes_of(&views[row], key);
                    let want = match from {
                        Some(from) => {
                            let t = src.tensor(key).unwrap();
                            let n = t.nbytes() / 8;
                            t.as_bytes()[from * n..(from + 1) * n].to_vec()
                        }
                        None => before[row][k].clone(),
                    };
                    prop_assert_eq!(got, want, "{} row {}", key, row);
                }
            }
        });
    }

    /// A gather reuses the storage of a batch its receiver dropped, and
    /// never that of one still held: a held batch keeps its values.
    #[allow(unsafe_code)]
    #[test]
    fn gathers_reuse_dropped_batches_and_leave_held_ones_alone() {
        let (mut rows, mut views) = LentRows::lend(&batch(2)).unwrap();
        let obs = |td: &TensorDict| td.tensor("obs").unwrap().to_vec::<f32>().unwrap();
        let address = |td: &TensorDict| td.tensor("obs").unwrap().as_bytes().as_ptr() as usize;
        let mut held = Vec::new();
        for round in 0..4 {
            for view in &mut views {
                write(view, round as f32);
            }
            // SAFETY: one thread: no view is in use during a gather.
            held.push(unsafe { rows.gather(&[0, 1]) });
        }
        for (round, td) in held.iter().enumerate() {
            assert_eq!(obs(td), [round as f32; 6], "held batch {round}");
        }
        // Dropped, the oldest kept one's storage comes back; the held ones
        // still keep their values.
        let last = held.pop().unwrap();
        let before = held.pop().unwrap();
        let freed = address(&before);
        drop(before);
        write(&mut views[0], 9.0);
        // SAFETY: as above.
        let again = unsafe { rows.gather(&[0, 1]) };
        assert_eq!(address(&again), freed);
        assert_eq!(obs(&again), [9.0, 9.0, 9.0, 3.0, 3.0, 3.0]);
        assert_eq!(obs(&last), [3.0; 6]);
        // A batch whose tensor is still held elsewhere is not reused.
        let kept = again.tensor("obs").unwrap().clone();
        drop(again);
        // SAFETY: as above.
        let other = unsafe { rows.gather(&[0, 1]) };
        assert_ne!(address(&other), kept.as_bytes().as_ptr() as usize);
        assert_eq!(
            kept.to_vec::<f32>().unwrap(),
            [9.0, 9.0, 9.0, 3.0, 3.0, 3.0]
        );
    }

    /// A copy made of a view (clone, index, reshape, a tensordict's clone)
    /// keeps its values when the row is written again.
    #[test]
    fn copies_of_a_view_do_not_follow_its_row() {
        let (_rows, mut views) = LentRows::lend(&batch(2)).unwrap();
        write(&mut views[1], 5.0);
        let td = views[1].clone();
        let tensor = views[1].tensor("obs").unwrap().clone();
        let first = views[1].tensor("obs").unwrap().index(0).unwrap();
        let flat = views[1].tensor("obs").unwrap().reshape(&[3, 1]).unwrap();
        write(&mut views[1], 7.0);
        assert_eq!(td.tensor("obs").unwrap().to_vec::<f32>().unwrap(), [5.0; 3]);
        assert_eq!(tensor.to_vec::<f32>().unwrap(), [5.0; 3]);
        assert_eq!(first.item::<f32>().unwrap(), 5.0);
        assert_eq!(flat.to_vec::<f32>().unwrap(), [5.0; 3]);
        assert!(!tensor.shares_storage(views[1].tensor("obs").unwrap()));
        assert_eq!(
            views[1].tensor("obs").unwrap().to_vec::<f32>().unwrap(),
            [7.0; 3]
        );
    }

    /// A holder that replaced a tensor (or added a key) no longer holds a
    /// view; its row can be written from it, with errors naming the key.
    #[allow(unsafe_code)]
    #[test]
    fn a_replaced_tensor_is_seen_and_its_row_written() {
        let (mut rows, mut views) = LentRows::lend(&batch(2)).unwrap();
        assert!(rows.is_view(0, &views[0]) && rows.is_view(1, &views[1]));
        assert!(!rows.is_view(1, &views[0]) && !rows.is_view(2, &views[0]));
        views[0]
            .set(
                "obs",
                Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap(),
            )
            .unwrap();
        assert!(!rows.is_view(0, &views[0]));
        // SAFETY: no view is in use (one thread).
        unsafe { rows.write_row(0, &views[0]) }.unwrap();
        // SAFETY: as above.
        let out = unsafe { rows.gather(&[0]) };
        assert_eq!(
            out.tensor("obs").unwrap().to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0]
        );

        let mut extra = views[1].clone();
        extra.set("more", Tensor::scalar(1i64)).unwrap();
        assert!(!rows.is_view(1, &extra));
        // SAFETY: as above.
        let err = unsafe { rows.write_row(1, &extra) }.unwrap_err();
        assert!(err.to_string().contains("more"), "{err}");
        let mut wrong = views[1].clone();
        wrong.set("obs", Tensor::zeros(DType::F64, &[3])).unwrap();
        // SAFETY: as above.
        let err = unsafe { rows.write_row(1, &wrong) }.unwrap_err();
        assert!(
            err.to_string().contains("obs") && err.to_string().contains("f64"),
            "{err}"
        );
        let mut missing = TensorDict::new(&[]);
        missing.set("obs", Tensor::zeros(DType::F32, &[3])).unwrap();
        // SAFETY: as above.
        let err = unsafe { rows.write_row(1, &missing) }.unwrap_err();
        assert!(err.to_string().contains("info"), "{err}");
    }

    /// Rows written from a batch hold its rows: all at once, some in any
    /// order, or one given whole; the rows not written keep theirs, and a
    /// source that is a view of the batch itself is read before it is
    /// written.
    #[allow(unsafe_code)]
    #[test]
    fn rows_are_written_from_a_batch() {
        let (rows, views) = LentRows::lend(&batch(3)).unwrap();
        let mut src = TensorDict::new(&[3]);
        src.set(
            "obs",
            Tensor::from_vec(&[3, 3], (0..9).map(|v| v as f32).collect()).unwrap(),
        )
        .unwrap();
        src.set(
            ("info", "done"),
            Tensor::from_vec(&[3], vec![true, false, true]).unwrap(),
        )
        .unwrap();
        // A key of `src` the batch lacks is left out.
        src.set("more", Tensor::zeros(DType::I64, &[3])).unwrap();
        let every = [(0, Some(0)), (1, Some(1)), (2, Some(2))];
        // SAFETY: no view is in use (one thread).
        unsafe { rows.write_rows_from(&src, &every) }.unwrap();
        let obs = |row: usize| views[row].tensor("obs").unwrap().to_vec::<f32>().unwrap();
        assert_eq!((obs(0), obs(2)), (vec![0.0, 1.0, 2.0], vec![6.0, 7.0, 8.0]));
        // SAFETY: as above.
        unsafe { rows.write_rows_from(&src, &[(2, Some(0)), (0, Some(1))]) }.unwrap();
        assert_eq!(
            (obs(0), obs(1), obs(2)),
            (
                vec![3.0, 4.0, 5.0],
                vec![3.0, 4.0, 5.0],
                vec![0.0, 1.0, 2.0]
            )
        );
        let done = |row: usize| {
            views[row]
                .tensor(("info", "done"))
                .unwrap()
                .to_vec::<bool>()
                .unwrap()
        };
        assert_eq!(
            (done(0), done(1), done(2)),
            (vec![false], vec![false], vec![true])
        );
        // Row 2's own view, written into row 1.
        // SAFETY: as above (the source is only read).
        unsafe { rows.write_rows_from(&views[2], &[(1, None)]) }.unwrap();
        assert_eq!((obs(1), done(1)), (vec![0.0, 1.0, 2.0], vec![true]));
    }

    /// A source that lacks a key, holds another dtype, shape or kind, or
    /// has no such row is an error naming the key; rows out of range of
    /// the batch panic.
    #[allow(unsafe_code)]
    #[test]
    fn rows_written_from_a_wrong_batch_are_errors() {
        let (rows, _views) = LentRows::lend(&batch(2)).unwrap();
        let good = batch(2);
        let mut missing = TensorDict::new(&[2]);
        missing
            .set("obs", Tensor::zeros(DType::F32, &[2, 3]))
            .unwrap();
        let mut wrong_dtype = good.clone();
        wrong_dtype
            .set("obs", Tensor::zeros(DType::F64, &[2, 3]))
            .unwrap();
        let mut wrong_shape = good.clone();
        wrong_shape
            .set("obs", Tensor::zeros(DType::F32, &[2, 4]))
            .unwrap();
        let mut non_tensor = good.clone();
        non_tensor
            .set("obs", crate::NonTensor::from(vec![1i64, 2]))
            .unwrap();
        // Too few rows for picks that read its rows in order.
        let one_row = batch(1);
        type Case<'a> = (&'a TensorDict, &'a [(usize, Option<usize>)], &'a [&'a str]);
        let cases: [Case<'_>; 7] = [
            (
                &one_row,
                &[(0, Some(0)), (1, Some(1))],
                &["done", "at row 1"],
            ),
            (&missing, &[(0, Some(0))], &["info"]),
            (&wrong_dtype, &[(0, Some(0))], &["obs", "f64"]),
            (&wrong_shape, &[(1, Some(1))], &["obs", "[2, 4]"]),
            (&non_tensor, &[(0, Some(0))], &["obs", "non-tensor"]),
            (&good, &[(0, Some(5))], &["at row 5"]),
            (&good, &[(0, None)], &["whole"]),
        ];
        for (src, picks, words) in cases {
            // SAFETY: no view is in use (one thread).
            let err = unsafe { rows.write_rows_from(src, picks) }.unwrap_err();
            for word in words {
                assert!(err.to_string().contains(word), "{word} in {err}");
            }
        }
        let out_of_range = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: as above.
            unsafe { rows.write_rows_from(&good, &[(2, Some(0))]) }
        }));
        assert!(out_of_range.is_err());
    }

    /// Every row written in order from a batch of as many rows or more (its
    /// first ones read), as the picks of every row would; a source of too
    /// few rows, or that lacks a key or holds another dtype, is an error
    /// naming the key.
    #[allow(unsafe_code)]
    #[test]
    fn every_row_is_written_from_the_first_rows_of_a_batch() {
        let (rows, views) = LentRows::lend(&batch(2)).unwrap();
        let obs = |row: usize| views[row].tensor("obs").unwrap().to_vec::<f32>().unwrap();
        let mut src = batch(3);
        src.set(
            "obs",
            Tensor::from_vec(&[3, 3], (0..9).map(|v| v as f32).collect()).unwrap(),
        )
        .unwrap();
        // SAFETY: no view is in use (one thread).
        unsafe { rows.write_every_row_from(&src) }.unwrap();
        assert_eq!((obs(0), obs(1)), (vec![0.0, 1.0, 2.0], vec![3.0, 4.0, 5.0]));
        let mut two = batch(2);
        two.set("obs", Tensor::full(&[2, 3], 9.0f32)).unwrap();
        // SAFETY: as above.
        unsafe { rows.write_every_row_from(&two) }.unwrap();
        assert_eq!((obs(0), obs(1)), (vec![9.0; 3], vec![9.0; 3]));
        let mut wrong_dtype = batch(2);
        wrong_dtype
            .set("obs", Tensor::zeros(DType::F64, &[2, 3]))
            .unwrap();
        let mut missing = TensorDict::new(&[2]);
        missing
            .set("obs", Tensor::zeros(DType::F32, &[2, 3]))
            .unwrap();
        let cases: [(TensorDict, &[&str]); 3] = [
            (batch(1), &["at row 1"]),
            (wrong_dtype, &["obs", "f64"]),
            (missing, &["info"]),
        ];
        for (src, words) in cases {
            // SAFETY: as above.
            let err = unsafe { rows.write_every_row_from(&src) }.unwrap_err();
            for word in words {
                assert!(err.to_string().contains(word), "{word} in {err}");
            }
        }
    }

    /// Tensors of rows of no bytes are lent, written and gathered like the
    /// others (nothing to copy), beside tensors that have bytes.
    #[allow(unsafe_code)]
    #[test]
    fn rows_of_no_bytes_are_written_and_gathered() {
        let mut with_empty = batch(3);
        with_empty
            .set("empty", Tensor::zeros(DType::F32, &[3, 0]))
            .unwrap();
        let (mut rows, views) = LentRows::lend(&with_empty).unwrap();
        let mut src = batch(2);
        src.set("empty", Tensor::zeros(DType::F32, &[2, 0]))
            .unwrap();
        src.set("obs", Tensor::full(&[2, 3], 7.0f32)).unwrap();
        // SAFETY: no view is in use (one thread).
        unsafe { rows.write_rows_from(&src, &[(2, Some(0)), (0, Some(1))]) }.unwrap();
        assert_eq!(
            views[2].tensor("obs").unwrap().to_vec::<f32>().unwrap(),
            vec![7.0; 3]
        );
        // SAFETY: as above.
        let out = unsafe { rows.gather(&[2, 1]) };
        assert_eq!(out.tensor("empty").unwrap().shape(), &[2, 0]);
        assert_eq!(
            out.tensor("obs").unwrap().to_vec::<f32>().unwrap(),
            [vec![7.0; 3], vec![0.0; 3]].concat()
        );
    }

    /// A gather that takes rows from another batch refuses one with other
    /// rows than its own, whatever map it is given.
    #[allow(unsafe_code)]
    #[test]
    #[should_panic(expected = "the other batch's rows")]
    fn a_gather_from_a_batch_of_other_rows_panics() {
        let (mut rows, _views) = LentRows::lend(&batch(2)).unwrap();
        let (like, _like_views) = LentRows::lend(&batch(2)).unwrap();
        let (other, _other_views) = LentRows::lend(&batch(3)).unwrap();
        // A map made for a batch like this one, given with another.
        let map = rows.leaves_in(&like).unwrap();
        assert!(rows.leaves_in(&other).is_none());
        // SAFETY: no view of either batch is in use (one thread).
        let _ = unsafe { rows.gather_or(&[0, 1], &[true, true], &other, &map) };
    }

    /// In a batch without sub-dicts too, a view whose tensor was replaced,
    /// or moved under another key, is no longer one.
    #[test]
    fn a_flat_view_moved_or_replaced_is_seen() {
        let mut td = TensorDict::new(&[2]);
        td.set("a", Tensor::zeros(DType::I64, &[2])).unwrap();
        td.set("b", Tensor::zeros(DType::F32, &[2, 2])).unwrap();
        let (rows, mut views) = LentRows::lend(&td).unwrap();
        assert!(rows.is_view(0, &views[0]) && rows.is_view(1, &views[1]));
        assert!(!rows.is_view(0, &views[1]));
        let moved = views[0].remove("b").unwrap();
        views[0].set("c", moved).unwrap();
        assert!(!rows.is_view(0, &views[0]));
        views[1].set("a", Tensor::zeros(DType::I64, &[])).unwrap();
        assert!(!rows.is_view(1, &views[1]));
    }

    /// Nothing to lend without rows or with a non-tensor.
    #[test]
    fn only_batches_of_tensors_are_lent() {
        assert!(LentRows::lend(&TensorDict::new(&[])).is_none());
        assert!(LentRows::lend(&batch(0)).is_none());
        let mut td = batch(2);
        td.set(
            ("info", "note"),
            crate::NonTensor::Stack(vec![1.into(), 2.into()].into()),
        )
        .unwrap();
        assert!(LentRows::lend(&td).is_none());
    }
}
