//! Row-wise copies between a batch and single rows, without building a
//! tensordict per row: what a pool does on every step (scatter the actions
//! of a batch into each env's input buffer, gather each env's result into a
//! row of the batch it returns).

use crate::{Entry, NestedKey, NonTensor, Shape, Tensor, TensorDict, TensorDictError};

impl TensorDict {
    /// A tensordict of zeros shaped like `n` copies of `template` stacked:
    /// batch size `[n, ..template batch]`, the same keys, each tensor of
    /// shape `[n, ..]`, each non-tensor value a stack of `n` copies. Fill it
    /// with [`TensorDict::write_row`].
    pub fn zeros_stacked(template: &TensorDict, n: usize) -> Result<TensorDict, TensorDictError> {
        let mut batch: Shape = Shape::with_capacity(template.batch_size().len() + 1);
        batch.push(n);
        batch.extend_from_slice(template.batch_size());
        let mut out = TensorDict::new(&batch);
        for (name, entry) in template.entries().iter() {
            let stacked = match entry {
                Entry::Tensor(t) => {
                    let mut shape: Shape = Shape::with_capacity(t.ndim() + 1);
                    shape.push(n);
                    shape.extend_from_slice(t.shape());
                    Entry::Tensor(Tensor::try_zeros(t.dtype(), &shape)?)
                }
                Entry::NonTensor(v) => {
                    Entry::NonTensor(NonTensor::Stack(vec![v.clone(); n].into()))
                }
                Entry::Dict(d) => Entry::Dict(TensorDict::zeros_stacked(d, n)?),
            };
            out.insert_raw(name.clone(), stacked);
        }
        Ok(out)
    }

    /// Copies `src` into row `row` of this batch: this tensordict's batch
    /// size is `[n, ..src batch]` and it has exactly `src`'s keys, dtypes and
    /// row shapes (an error naming the first key that differs; the row may
    /// then be partly written). Copies bytes only: no allocation unless a
    /// tensor here is shared (copy on write).
    pub fn write_row(&mut self, row: usize, src: &TensorDict) -> Result<(), TensorDictError> {
        self.check_row(row, src.batch_size())?;
        write_columns(self, &[src], RowsAt::From(row), &NestedKey::default())
    }

    /// Writes `rows[j]` into row `j` of this batch, for every `j`: as
    /// [`TensorDict::write_row`] for each, but column by column, so that each
    /// tensor of the batch is made writable once, not once per row. Every
    /// row has exactly the batch's keys, dtypes and row shapes (an error
    /// naming the first key and row that differ).
    pub fn write_rows(&mut self, rows: &[&TensorDict]) -> Result<(), TensorDictError> {
        if self.batch_size().first() != Some(&rows.len()) {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: self.batch_size().to_vec(),
                found: vec![rows.len()],
            });
        }
        for (j, row) in rows.iter().enumerate() {
            if row.batch_size() != &self.batch_size()[1..] {
                return Err(TensorDictError::StackBatchSize {
                    index: j,
                    expected: self.batch_size()[1..].to_vec(),
                    found: row.batch_size().to_vec(),
                });
            }
        }
        write_columns(self, rows, RowsAt::From(0), &NestedKey::default())
    }

    /// Writes `rows[j]` into row `at[j]` of this batch, for every `j`,
    /// column by column (each tensor of the batch is made writable once):
    /// as [`TensorDict::write_rows`] for rows that are not consecutive. Every
    /// row has exactly the batch's keys, dtypes and row shapes and every
    /// `at[j]` is a row of the batch (an error naming the first key and row
    /// that differ; the batch may then be partly written).
    pub fn write_rows_at(
        &mut self,
        at: &[usize],
        rows: &[&TensorDict],
    ) -> Result<(), TensorDictError> {
        if at.len() != rows.len() {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: vec![at.len()],
                found: vec![rows.len()],
            });
        }
        let (&len, rest) = self
            .batch_size()
            .split_first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "row copy" })?;
        for (&row, src) in at.iter().zip(rows) {
            if row >= len || !same_shape(rest, src.batch_size()) {
                self.check_row(row, src.batch_size())?;
            }
        }
        write_columns(self, rows, RowsAt::At(at), &NestedKey::default())
    }

    /// Rows `rows` of this batch (in that order, repeats allowed) as a new
    /// batch of batch size `[rows.len(), ..]`: each tensor copied into a new
    /// storage row by row, each non-tensor stack picked. An error if a row
    /// is out of range or a non-tensor entry is not a stack.
    pub fn gather_rows(&self, rows: &[usize]) -> Result<TensorDict, TensorDictError> {
        let len = *self
            .batch_size()
            .first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "row gather" })?;
        if let Some(&index) = rows.iter().find(|&&r| r >= len) {
            return Err(TensorDictError::IndexOutOfRange { index, len });
        }
        gather_at(self, rows, &NestedKey::default())
    }

    /// Rows `rows` of this batch as a batch of their own: this batch itself
    /// (shared, copied on write) when `rows` is every row in order; else
    /// written into `reuse` when it holds a batch of as many rows (the one
    /// this returned the last time: in place once its other holders dropped
    /// it, copied on write otherwise), else into a new one that `reuse`
    /// keeps: a caller that gathers batches of one size allocates none in
    /// steady state. An error if a row is out of range (`reuse` is then
    /// emptied).
    pub fn gather_rows_reusing(
        &self,
        rows: &[usize],
        reuse: &mut Option<TensorDict>,
    ) -> Result<TensorDict, TensorDictError> {
        let every_row = self.batch_size().first() == Some(&rows.len())
            && rows.iter().enumerate().all(|(i, &row)| i == row);
        if every_row {
            return Ok(self.clone());
        }
        if let Some(out) = reuse.as_mut() {
            if out.batch_size().first() == Some(&rows.len())
                && self.gather_rows_into(rows, out).is_ok()
            {
                return Ok(out.clone());
            }
        }
        *reuse = None;
        let out = self.gather_rows(rows)?;
        *reuse = Some(out.clone());
        Ok(out)
    }

    /// Rows `rows` of this batch written into `out`, a batch of
    /// `rows.len()` rows with this batch's keys, dtypes and row shapes (as
    /// [`TensorDict::gather_rows`] made it): the same result, in `out`'s
    /// storage when nobody else holds it (copy on write otherwise), so a
    /// caller that keeps `out` allocates nothing. An error if a row is out of
    /// range or `out` is not shaped so (it may then be partly written).
    pub fn gather_rows_into(
        &self,
        rows: &[usize],
        out: &mut TensorDict,
    ) -> Result<(), TensorDictError> {
        let len = *self
            .batch_size()
            .first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "row gather" })?;
        if let Some(&index) = rows.iter().find(|&&r| r >= len) {
            return Err(TensorDictError::IndexOutOfRange { index, len });
        }
        if out.batch_size().first() != Some(&rows.len())
            || !same_shape(&out.batch_size()[1..], &self.batch_size()[1..])
        {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: out.batch_size().to_vec(),
                found: self.batch_size().to_vec(),
            });
        }
        gather_into_at(
            self,
            rows,
            out,
            RowsAt::From(0),
            Keys::Same,
            &NestedKey::default(),
        )
    }

    /// Copies row `src_row` of the batch `src` into row `row` of this batch
    /// (both batches have the same keys and row shapes), without building a
    /// tensordict for the row.
    pub fn copy_row(
        &mut self,
        row: usize,
        src: &TensorDict,
        src_row: usize,
    ) -> Result<(), TensorDictError> {
        src.check_row(
            src_row,
            &self.batch_size()[1.min(self.batch_size().len())..],
        )?;
        self.check_row(row, &src.batch_size()[1..])?;
        copy_row_at(self, row, src, src_row, &NestedKey::default())
    }

    /// Copies row `src_rows[j]` of the batch `src` into row `at[j]` of this
    /// batch, for every `j` (both batches have the same keys and row
    /// shapes): as [`TensorDict::copy_row`] for each, but column by column,
    /// so that each tensor of this batch is made writable once. An error if
    /// a row is out of range or the batches differ (this batch may then be
    /// partly written).
    pub fn copy_rows(
        &mut self,
        at: &[usize],
        src: &TensorDict,
        src_rows: &[usize],
    ) -> Result<(), TensorDictError> {
        self.copy_rows_with(at, src, src_rows, Keys::Same)
    }

    /// As [`TensorDict::copy_rows`], but `src` may have more keys: each
    /// entry of this batch takes rows of `src`'s entry at the same key (as
    /// [`TensorDict::fill_from`] does for a whole tensordict). What a root
    /// batch (a step's entries without the reward) takes from the step's
    /// batch.
    pub fn fill_rows_from(
        &mut self,
        at: &[usize],
        src: &TensorDict,
        src_rows: &[usize],
    ) -> Result<(), TensorDictError> {
        self.copy_rows_with(at, src, src_rows, Keys::Subset)
    }

    fn copy_rows_with(
        &mut self,
        at: &[usize],
        src: &TensorDict,
        src_rows: &[usize],
        keys: Keys,
    ) -> Result<(), TensorDictError> {
        if at.len() != src_rows.len() {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: vec![src_rows.len()],
                found: vec![at.len()],
            });
        }
        let (Some((&len, rest)), Some((&src_len, src_rest))) = (
            self.batch_size().split_first(),
            src.batch_size().split_first(),
        ) else {
            return Err(TensorDictError::ZeroDim { what: "row copy" });
        };
        if !same_shape(rest, src_rest) {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: rest.to_vec(),
                found: src_rest.to_vec(),
            });
        }
        for (rows, len) in [(at, len), (src_rows, src_len)] {
            if let Some(&index) = rows.iter().find(|&&row| row >= len) {
                return Err(TensorDictError::IndexOutOfRange { index, len });
            }
        }
        gather_into_at(
            src,
            src_rows,
            self,
            RowsAt::At(at),
            keys,
            &NestedKey::default(),
        )
    }

    /// Copies row `row` of this batch into `dst`, for the keys `dst` has
    /// (sub-dicts recursively): `dst`'s batch size is this one without its
    /// first dim. An error names a key of `dst` missing here or of another
    /// dtype or shape.
    pub fn read_row(&self, row: usize, dst: &mut TensorDict) -> Result<(), TensorDictError> {
        self.check_row(row, dst.batch_size())?;
        read_at(self, Some(row), dst, &NestedKey::default())
    }

    /// Copies into each entry of this tensordict the entry of `src` at the
    /// same key (same dtype and shape; `src` may have more keys). Copies
    /// bytes only.
    pub fn fill_from(&mut self, src: &TensorDict) -> Result<(), TensorDictError> {
        if src.batch_size() != self.batch_size() {
            return Err(TensorDictError::StackBatchSize {
                index: 0,
                expected: self.batch_size().to_vec(),
                found: src.batch_size().to_vec(),
            });
        }
        read_at(src, None, self, &NestedKey::default())
    }

    fn check_row(&self, row: usize, row_batch: &[usize]) -> Result<(), TensorDictError> {
        let (&len, rest) = self
            .batch_size()
            .split_first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "row copy" })?;
        if !same_shape(rest, row_batch) {
            return Err(TensorDictError::StackBatchSize {
                index: row,
                expected: rest.to_vec(),
                found: row_batch.to_vec(),
            });
        }
        if row >= len {
            return Err(TensorDictError::IndexOutOfRange { index: row, len });
        }
        Ok(())
    }
}

pub(crate) fn row_mismatch(key: NestedKey, row: usize, reason: String) -> TensorDictError {
    TensorDictError::StackDicts {
        key,
        index: row,
        reason,
    }
}

/// The bytes of row `row` of `t` (or all of `t`), given the size of a row.
fn row_bytes(t: &Tensor, row: Option<usize>, n: usize) -> &[u8] {
    match row {
        Some(r) => &t.as_bytes()[r * n..(r + 1) * n],
        None => t.as_bytes(),
    }
}

/// The shape of one row of `t` (or `t`'s shape).
fn row_shape(t: &Tensor, row: Option<usize>) -> &[usize] {
    match row {
        Some(_) => &t.shape()[1..],
        None => t.shape(),
    }
}

/// The error for a row whose keys are not the batch's: names a key that one
/// side lacks.
fn key_set_mismatch(
    batch: &TensorDict,
    row: &TensorDict,
    index: usize,
    prefix: &NestedKey,
) -> TensorDictError {
    let (key, reason) = batch
        .iter()
        .map(|(k, _)| k)
        .find(|k| !row.contains(*k))
        .map(|k| (k, "lacks this key (the batch has it)"))
        .or_else(|| {
            row.iter()
                .map(|(k, _)| k)
                .find(|k| !batch.contains(*k))
                .map(|k| (k, "has this key but the batch does not"))
        })
        .unwrap_or_default();
    row_mismatch(prefix.child(key), index, reason.into())
}

/// Writes row `src_row` of the batch `src` into row `row` of `batch`.
fn copy_row_at(
    batch: &mut TensorDict,
    row: usize,
    src: &TensorDict,
    src_row: usize,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    if batch.len() != src.len() {
        return Err(key_set_mismatch(batch, src, row, prefix));
    }
    // Both levels are sorted by key and of one length: walk them in
    // lockstep (no lookup per key).
    for (position, (name, entry)) in src.iter().enumerate() {
        let (batch_name, target) = batch.entries_mut().at_named_mut(position);
        if !crate::entries::same_name(batch_name, name) {
            return Err(row_mismatch(
                prefix.child(name),
                row,
                "has this key but the batch does not".into(),
            ));
        }
        match (target, entry) {
            (Entry::Tensor(dst), Entry::Tensor(t)) => {
                if dst.dtype() != t.dtype() || dst.shape()[1..] != t.shape()[1..] {
                    return Err(row_mismatch(
                        prefix.child(name),
                        row,
                        format!(
                            "has shape {:?} and dtype {} but the batch rows have shape {:?} and dtype {}",
                            &t.shape()[1..],
                            t.dtype(),
                            &dst.shape()[1..],
                            dst.dtype()
                        ),
                    ));
                }
                let n = dst.nbytes() / dst.shape()[0].max(1);
                dst.bytes_mut()[row * n..(row + 1) * n]
                    .copy_from_slice(&t.as_bytes()[src_row * n..(src_row + 1) * n]);
            }
            (Entry::NonTensor(NonTensor::Stack(items)), Entry::NonTensor(v))
                if row < items.len() =>
            {
                items[row] =
                    v.index(src_row)
                        .cloned()
                        .ok_or_else(|| TensorDictError::IndexOutOfRange {
                            index: src_row,
                            len: v.unbind().map_or(0, <[NonTensor]>::len),
                        })?;
            }
            (Entry::Dict(dst), Entry::Dict(d)) => {
                copy_row_at(dst, row, d, src_row, &prefix.child(name))?
            }
            (dst, entry) => {
                return Err(row_mismatch(
                    prefix.child(name),
                    row,
                    format!("is a {} but the batch holds a {}", entry.kind(), dst.kind()),
                ))
            }
        }
    }
    Ok(())
}

/// Whether a row copy's source has exactly the destination's keys, in
/// order, or may have more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    Same,
    Subset,
}

/// Where each written row goes: row `first + j`, or row `at[j]`.
#[derive(Clone, Copy)]
enum RowsAt<'a> {
    From(usize),
    At(&'a [usize]),
}

impl RowsAt<'_> {
    fn get(self, j: usize) -> usize {
        match self {
            RowsAt::From(first) => first + j,
            RowsAt::At(at) => at[j],
        }
    }
}

/// Copies `src` into `dst` (of the same length): the sizes of a small row
/// (one scalar, a few values) as fixed-size moves, without a `memcpy` call.
#[inline(always)]
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    #[inline]
    fn fixed<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let dst: &mut [u8; N] = dst.try_into().expect("lengths checked by the caller");
        let src: &[u8; N] = src.try_into().expect("one length");
        *dst = *src;
    }
    match src.len() {
        1 => fixed::<1>(dst, src),
        2 => fixed::<2>(dst, src),
        4 => fixed::<4>(dst, src),
        8 => fixed::<8>(dst, src),
        16 => fixed::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Copies row `rows[j]` of `src` into row `at.get(j)` of `dst`, rows of
/// `n` bytes: the sizes of a small row as fixed-size moves, chosen once for
/// all rows (not per row, as [`copy_bytes`] does).
fn copy_rows_bytes(dst: &mut [u8], src: &[u8], n: usize, rows: &[usize], at: RowsAt<'_>) {
    /// `N` bytes a row (`N == 0`: `n`, with a `memcpy` each).
    #[inline(always)]
    fn rows_of<const N: usize>(
        dst: &mut [u8],
        src: &[u8],
        n: usize,
        rows: &[usize],
        at: RowsAt<'_>,
    ) {
        let n = if N == 0 { n } else { N };
        for (j, &row) in rows.iter().enumerate() {
            let to = at.get(j);
            dst[to * n..(to + 1) * n].copy_from_slice(&src[row * n..(row + 1) * n]);
        }
    }
    match n {
        1 => rows_of::<1>(dst, src, n, rows, at),
        2 => rows_of::<2>(dst, src, n, rows, at),
        4 => rows_of::<4>(dst, src, n, rows, at),
        8 => rows_of::<8>(dst, src, n, rows, at),
        16 => rows_of::<16>(dst, src, n, rows, at),
        _ => rows_of::<0>(dst, src, n, rows, at),
    }
}

/// Whether two shapes are equal, without a `memcmp` call (shapes are short).
#[inline]
pub(crate) fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The error for row `j`'s entry at `position` when its key is not the
/// batch's, if it is not.
fn check_name(
    row: &TensorDict,
    position: usize,
    name: &str,
    at: usize,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    let (row_name, _) = row.entries().at_named(position);
    if crate::entries::same_name(row_name, name) {
        Ok(())
    } else {
        Err(row_mismatch(
            prefix.child(row_name),
            at,
            "has this key but the batch does not".into(),
        ))
    }
}

/// Writes `rows[j]` into row `at.get(j)` of `batch`, one entry (column) at
/// a time: each column is checked for every row, then written (so each
/// tensor of the batch is made writable once per call); errors name the
/// batch row.
fn write_columns(
    batch: &mut TensorDict,
    rows: &[&TensorDict],
    at: RowsAt<'_>,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    for (j, row) in rows.iter().enumerate() {
        if row.len() != batch.len() {
            return Err(key_set_mismatch(batch, row, at.get(j), prefix));
        }
    }
    for position in 0..batch.len() {
        let (name, target) = batch.entries_mut().at_named_mut(position);
        let column = |j: usize| rows[j].entries().at_named(position).1;
        if !matches!(target, Entry::Tensor(_)) {
            for (j, row) in rows.iter().enumerate() {
                check_name(row, position, name, at.get(j), prefix)?;
            }
        }
        match target {
            Entry::Tensor(dst) => {
                let n = dst.nbytes() / dst.shape()[0].max(1);
                let dtype = dst.dtype();
                let row_shape: Shape = Shape::from_slice(&dst.shape()[1..]);
                // One pass: each row checked, then written (an error leaves
                // the rows before it written).
                let bytes = dst.bytes_mut();
                for (j, src) in rows.iter().enumerate() {
                    let (row_name, entry) = src.entries().at_named(position);
                    if !crate::entries::same_name(row_name, name) {
                        check_name(src, position, name, at.get(j), prefix)?;
                    }
                    match entry {
                        Entry::Tensor(t) if t.dtype() == dtype && same_shape(t.shape(), &row_shape) => {
                            let row = at.get(j);
                            copy_bytes(&mut bytes[row * n..(row + 1) * n], t.as_bytes());
                        }
                        Entry::Tensor(t) => {
                            return Err(row_mismatch(
                                prefix.child(name),
                                at.get(j),
                                format!(
                                    "has shape {:?} and dtype {} but the batch rows have shape {row_shape:?} and dtype {dtype}",
                                    t.shape(),
                                    t.dtype(),
                                ),
                            ))
                        }
                        other => {
                            return Err(row_mismatch(
                                prefix.child(name),
                                at.get(j),
                                format!("is a {} but the batch holds a tensor", other.kind()),
                            ))
                        }
                    }
                }
            }
            Entry::NonTensor(NonTensor::Stack(items)) => {
                for j in 0..rows.len() {
                    let row = at.get(j);
                    match column(j) {
                        Entry::NonTensor(v) if row < items.len() => items[row] = v.clone(),
                        Entry::NonTensor(_) => {
                            return Err(TensorDictError::IndexOutOfRange {
                                index: row,
                                len: items.len(),
                            })
                        }
                        other => {
                            return Err(row_mismatch(
                                prefix.child(name),
                                row,
                                format!("is a {} but the batch holds a non-tensor", other.kind()),
                            ))
                        }
                    }
                }
            }
            Entry::Dict(dst) => {
                let mut subs = Vec::with_capacity(rows.len());
                for j in 0..rows.len() {
                    match column(j) {
                        Entry::Dict(d) => subs.push(d),
                        other => {
                            return Err(row_mismatch(
                                prefix.child(name),
                                at.get(j),
                                format!("is a {} but the batch holds a tensordict", other.kind()),
                            ))
                        }
                    }
                }
                let key = prefix.child(name);
                write_columns(dst, &subs, at, &key)?;
            }
            other => {
                return Err(row_mismatch(
                    prefix.child(name),
                    at.get(0),
                    format!("cannot be written: the batch holds a {}", other.kind()),
                ))
            }
        }
    }
    Ok(())
}

/// Rows `rows` of `batch`, in that order, as a new batch.
fn gather_at(
    batch: &TensorDict,
    rows: &[usize],
    prefix: &NestedKey,
) -> Result<TensorDict, TensorDictError> {
    let mut size: Shape = Shape::with_capacity(batch.batch_size().len());
    size.push(rows.len());
    size.extend_from_slice(&batch.batch_size()[1..]);
    let mut out = TensorDict::new(&size);
    for (name, entry) in batch.entries().iter() {
        let gathered = match entry {
            Entry::Tensor(t) => {
                let mut shape: Shape = Shape::from_slice(t.shape());
                shape[0] = rows.len();
                let mut g = Tensor::try_zeros(t.dtype(), &shape)?;
                let n = t.nbytes() / t.shape()[0].max(1);
                if n > 0 {
                    copy_rows_bytes(g.bytes_mut(), t.as_bytes(), n, rows, RowsAt::From(0));
                }
                Entry::Tensor(g)
            }
            Entry::NonTensor(NonTensor::Stack(items)) => Entry::NonTensor(NonTensor::Stack(
                rows.iter().map(|&r| items[r].clone()).collect(),
            )),
            Entry::NonTensor(v) => {
                return Err(row_mismatch(
                    prefix.child(name),
                    0,
                    format!(
                        "is a single {} where a stack of rows was expected",
                        v.kind()
                    ),
                ))
            }
            Entry::Dict(d) => Entry::Dict(gather_at(d, rows, &prefix.child(name))?),
        };
        out.insert_raw(name.clone(), gathered);
    }
    Ok(out)
}

/// Writes row `rows[j]` of `batch` into row `at.get(j)` of `out` (the same
/// keys, dtypes and row shapes; every row in range), column by column.
fn gather_into_at(
    batch: &TensorDict,
    rows: &[usize],
    out: &mut TensorDict,
    at: RowsAt<'_>,
    keys: Keys,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    if keys == Keys::Same && batch.len() != out.len() {
        return Err(key_set_mismatch(out, batch, 0, prefix));
    }
    let len = out.batch_size().first().copied().unwrap_or(0);
    // Where the next key is likely to be in `batch` (both levels are
    // sorted, and `out`'s keys are `batch`'s or a subset).
    let mut hint = 0;
    for position in 0..out.len() {
        let (name, target) = out.entries_mut().at_named_mut(position);
        let entries = batch.entries();
        let found = match keys {
            Keys::Subset => entries.position_near(name, hint),
            // The same keys in the same order: only this position will do.
            Keys::Same => {
                crate::entries::same_name(entries.at_named(position).0, name).then_some(position)
            }
        };
        let Some(found) = found else {
            return Err(match keys {
                // Same length (checked above), so `position` is an entry.
                Keys::Same => row_mismatch(
                    prefix.child(entries.at_named(position).0),
                    0,
                    "has this key but the gathered batch does not".into(),
                ),
                Keys::Subset => TensorDictError::KeyNotFound {
                    key: prefix.child(name),
                    available: batch.iter().map(|(k, _)| k.to_owned()).collect(),
                },
            });
        };
        hint = found + 1;
        let entry = entries.at(found);
        match (target, entry) {
            (Entry::Tensor(dst), Entry::Tensor(t))
                if dst.dtype() == t.dtype() && same_shape(&dst.shape()[1..], &t.shape()[1..]) =>
            {
                let n = t.nbytes() / t.shape()[0].max(1);
                if n > 0 {
                    copy_rows_bytes(dst.bytes_mut(), t.as_bytes(), n, rows, at);
                }
            }
            (
                Entry::NonTensor(NonTensor::Stack(items)),
                Entry::NonTensor(NonTensor::Stack(src)),
            ) if items.len() == len => {
                for (j, &row) in rows.iter().enumerate() {
                    items[at.get(j)] = src[row].clone();
                }
            }
            (Entry::Dict(dst), Entry::Dict(d)) => {
                gather_into_at(d, rows, dst, at, keys, &prefix.child(name))?
            }
            (target, entry) => {
                return Err(row_mismatch(
                    prefix.child(name),
                    0,
                    format!(
                        "is a {} here but the gathered batch holds a {} of another shape",
                        entry.kind(),
                        target.kind()
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Fills every entry of `dst` from `batch` (its row `row`, or all of it).
fn read_at(
    batch: &TensorDict,
    row: Option<usize>,
    dst: &mut TensorDict,
    prefix: &NestedKey,
) -> Result<(), TensorDictError> {
    // Where the next key is likely to be in `batch` (both levels are
    // sorted; often one has the other's keys, or a few more).
    let mut hint = 0;
    for position in 0..dst.len() {
        let (name, target) = dst.entries_mut().at_named_mut(position);
        let found = batch.entries().position_near(name, hint);
        hint = found.map_or(hint, |i| i + 1);
        let Some(source) = found.map(|i| batch.entries().at(i)) else {
            return Err(TensorDictError::KeyNotFound {
                key: prefix.child(name),
                available: batch.iter().map(|(k, _)| k.to_owned()).collect(),
            });
        };
        let mismatch =
            |what: &str, reason: String| row_mismatch(prefix.child(what), row.unwrap_or(0), reason);
        match (target, source) {
            (Entry::Tensor(t), Entry::Tensor(src)) => {
                if src.dtype() != t.dtype() || !same_shape(row_shape(src, row), t.shape()) {
                    return Err(mismatch(
                        name,
                        format!(
                            "has shape {:?} and dtype {} here but the destination has shape {:?} and dtype {}",
                            row_shape(src, row),
                            src.dtype(),
                            t.shape(),
                            t.dtype()
                        ),
                    ));
                }
                let n = t.nbytes();
                copy_bytes(t.bytes_mut(), row_bytes(src, row, n));
            }
            (Entry::NonTensor(v), Entry::NonTensor(src)) => {
                *v =
                    match row {
                        None => src.clone(),
                        Some(r) => src.index(r).cloned().ok_or_else(|| {
                            TensorDictError::IndexOutOfRange {
                                index: r,
                                len: src.unbind().map_or(0, <[NonTensor]>::len),
                            }
                        })?,
                    };
            }
            (Entry::Dict(d), Entry::Dict(src)) => {
                let key = prefix.child(name);
                read_at(src, row, d, &key)?
            }
            (target, source) => {
                return Err(mismatch(
                    name,
                    format!(
                        "is a {} here but the destination holds a {}",
                        source.kind(),
                        target.kind()
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
    use crate::DType;

    fn step(v: f32, i: i64) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        td.set("observation", Tensor::full(&[3], v)).unwrap();
        td.set(
            ("next", "done"),
            Tensor::from_vec(&[1], vec![v > 1.0]).unwrap(),
        )
        .unwrap();
        td.set("env_index", NonTensor::Int(i)).unwrap();
        td
    }

    #[test]
    fn write_rows_then_read_them_back() {
        let rows = vec![step(0.0, 0), step(1.0, 1), step(2.0, 2)];
        let mut batch = TensorDict::zeros_stacked(&rows[0], 3).unwrap();
        for (i, r) in rows.iter().enumerate().rev() {
            batch.write_row(i, r).unwrap();
        }
        assert_eq!(batch, TensorDict::stack(&rows).unwrap());
        let mut dst = TensorDict::zeros_stacked(&rows[0], 1)
            .unwrap()
            .index(0)
            .unwrap();
        batch.read_row(2, &mut dst).unwrap();
        assert_eq!(dst, rows[2]);
    }

    /// `gather_rows_reusing`: every row in order is the batch itself
    /// (shared); other rows are gathered into the kept batch of as many
    /// rows (in place once its holders dropped it), or a new one; a row out
    /// of range is an error that empties the kept batch.
    #[test]
    fn gathers_reuse_the_batch_of_the_last_gather() {
        let batch = TensorDict::stack(&[step(0.0, 0), step(1.0, 1), step(2.0, 2)]).unwrap();
        let mut reuse = None;
        let all = batch.gather_rows_reusing(&[0, 1, 2], &mut reuse).unwrap();
        assert_eq!(all, batch);
        assert!(reuse.is_none());
        let first = batch.gather_rows_reusing(&[2, 0], &mut reuse).unwrap();
        assert_eq!(first, batch.gather_rows(&[2, 0]).unwrap());
        let storage =
            |td: &TensorDict| td.tensor("observation").unwrap().as_bytes().as_ptr() as usize;
        let kept = storage(reuse.as_ref().unwrap());
        drop(first);
        let second = batch.gather_rows_reusing(&[1, 2], &mut reuse).unwrap();
        assert_eq!(second, batch.gather_rows(&[1, 2]).unwrap());
        // The kept batch's storage: written in place.
        assert_eq!(storage(&second), kept);
        let one = batch.gather_rows_reusing(&[1], &mut reuse).unwrap();
        assert_eq!(one, batch.gather_rows(&[1]).unwrap());
        let err = batch.gather_rows_reusing(&[5], &mut reuse).unwrap_err();
        assert!(
            matches!(err, TensorDictError::IndexOutOfRange { index: 5, len: 3 }),
            "{err}"
        );
        assert!(reuse.is_none());
    }

    #[test]
    fn read_row_fills_only_the_destination_keys() {
        let batch = TensorDict::stack(&[step(0.0, 0), step(5.0, 1)]).unwrap();
        let mut dst = TensorDict::new(&[]);
        dst.set("observation", Tensor::zeros(DType::F32, &[3]))
            .unwrap();
        batch.read_row(1, &mut dst).unwrap();
        assert_eq!(
            dst.tensor("observation").unwrap().to_vec::<f32>().unwrap(),
            vec![5.0; 3]
        );
        let mut missing = TensorDict::new(&[]);
        missing
            .set("action", Tensor::zeros(DType::I64, &[1]))
            .unwrap();
        let err = batch.read_row(0, &mut missing).unwrap_err();
        assert!(
            err.to_string().starts_with(r#"key "action" not found"#),
            "{err}"
        );
        let mut wrong = TensorDict::new(&[]);
        wrong
            .set("observation", Tensor::zeros(DType::F32, &[4]))
            .unwrap();
        assert!(batch.read_row(0, &mut wrong).is_err());
        assert!(batch.read_row(2, &mut dst).is_err());
    }

    #[test]
    fn write_row_errors_name_the_key() {
        let mut batch = TensorDict::zeros_stacked(&step(0.0, 0), 2).unwrap();
        let mut other = step(0.0, 0);
        other
            .set("observation", Tensor::zeros(DType::F32, &[4]))
            .unwrap();
        let err = batch.write_row(0, &other).unwrap_err();
        assert!(err.to_string().contains(r#"at key "observation""#), "{err}");
        let mut extra = step(0.0, 0);
        extra.set("zzz", Tensor::scalar(1u8)).unwrap();
        let err = batch.write_row(0, &extra).unwrap_err();
        assert!(err.to_string().contains(r#""zzz""#), "{err}");
        assert!(batch.write_row(2, &step(0.0, 0)).is_err());
        assert!(TensorDict::new(&[]).write_row(0, &step(0.0, 0)).is_err());
    }

    #[test]
    fn write_rows_equals_stack_and_names_bad_rows() {
        let rows = vec![step(0.0, 0), step(1.0, 1), step(2.0, 2)];
        let mut batch = TensorDict::zeros_stacked(&rows[0], 3).unwrap();
        batch.write_rows(&rows.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(batch, TensorDict::stack(&rows).unwrap());
        let mut bad = step(3.0, 3);
        bad.set("observation", Tensor::zeros(DType::F32, &[4]))
            .unwrap();
        let err = batch.write_rows(&[&rows[0], &bad, &rows[2]]).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"at key "observation", tensordict 1"#),
            "{err}"
        );
        assert!(batch.write_rows(&[&rows[0]]).is_err());
        let mut extra = step(0.0, 0);
        extra.set("zzz", Tensor::scalar(1u8)).unwrap();
        assert!(batch.write_rows(&[&rows[0], &rows[1], &extra]).is_err());
    }

    #[test]
    fn write_rows_at_scatters_and_gather_rows_picks() {
        let rows = [step(0.0, 0), step(1.0, 1), step(2.0, 2)];
        let mut batch = TensorDict::zeros_stacked(&rows[0], 4).unwrap();
        batch
            .write_rows_at(&[3, 0, 2], &[&rows[0], &rows[1], &rows[2]])
            .unwrap();
        assert_eq!(batch.index(3).unwrap(), rows[0]);
        assert_eq!(batch.index(0).unwrap(), rows[1]);
        assert_eq!(batch.index(2).unwrap(), rows[2]);
        let mut picked = batch.gather_rows(&[0, 2, 3]).unwrap();
        let stack = |r: [usize; 3]| TensorDict::stack(&r.map(|i| rows[i].clone())).unwrap();
        assert_eq!(picked, stack([1, 2, 0]));
        // Into a batch held by nobody else: in place; held: copied first.
        let held = picked.clone();
        batch.gather_rows_into(&[3, 3, 0], &mut picked).unwrap();
        assert_eq!(picked, stack([0, 0, 1]));
        assert_eq!(held, stack([1, 2, 0]));
        let before = picked.tensor("observation").unwrap().as_bytes().as_ptr();
        batch.gather_rows_into(&[2, 0, 3], &mut picked).unwrap();
        assert_eq!(
            picked.tensor("observation").unwrap().as_bytes().as_ptr(),
            before
        );
        assert!(batch.gather_rows_into(&[0, 1], &mut picked).is_err());
        assert!(batch.gather_rows_into(&[0, 1, 4], &mut picked).is_err());
        assert!(batch.gather_rows(&[4]).is_err());
        assert!(batch.write_rows_at(&[4], &[&rows[0]]).is_err());
        assert!(batch.write_rows_at(&[0, 1], &[&rows[0]]).is_err());
        let mut bad = step(3.0, 3);
        bad.set("observation", Tensor::zeros(DType::F32, &[4]))
            .unwrap();
        let err = batch.write_rows_at(&[1], &[&bad]).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"at key "observation", tensordict 1"#),
            "{err}"
        );
    }

    #[test]
    fn copy_row_and_fill_from() {
        let src = TensorDict::stack(&[step(1.0, 4), step(2.0, 5)]).unwrap();
        let mut dst = TensorDict::zeros_stacked(&step(0.0, 0), 3).unwrap();
        dst.copy_row(2, &src, 0).unwrap();
        dst.copy_row(0, &src, 1).unwrap();
        assert_eq!(dst.index(2).unwrap(), step(1.0, 4));
        assert_eq!(dst.index(0).unwrap(), step(2.0, 5));
        assert!(dst.copy_row(0, &src, 2).is_err());
        let mut one = step(0.0, 0);
        one.fill_from(&step(3.0, 9)).unwrap();
        assert_eq!(one, step(3.0, 9));
        assert!(one.fill_from(&src).is_err());
    }

    #[test]
    fn copy_rows_is_copy_row_for_each() {
        let src = TensorDict::stack(&[step(1.0, 4), step(2.0, 5), step(3.0, 6)]).unwrap();
        let mut one_by_one = TensorDict::zeros_stacked(&step(0.0, 0), 4).unwrap();
        for (row, src_row) in [(3, 0), (0, 2), (1, 2)] {
            one_by_one.copy_row(row, &src, src_row).unwrap();
        }
        let mut dst = TensorDict::zeros_stacked(&step(0.0, 0), 4).unwrap();
        let held = dst.clone();
        dst.copy_rows(&[3, 0, 1], &src, &[0, 2, 2]).unwrap();
        assert_eq!(dst, one_by_one);
        assert_eq!(held, TensorDict::zeros_stacked(&step(0.0, 0), 4).unwrap());
        assert!(dst.copy_rows(&[4], &src, &[0]).is_err());
        assert!(dst.copy_rows(&[0], &src, &[3]).is_err());
        assert!(dst.copy_rows(&[0, 1], &src, &[0]).is_err());
        let mut other = step(1.0, 1);
        other.set("extra", Tensor::full(&[1], 1i64)).unwrap();
        let other = TensorDict::stack(&[other]).unwrap();
        assert!(dst.copy_rows(&[0], &other, &[0]).is_err());
    }

    #[test]
    fn fill_rows_from_takes_the_rows_of_the_keys_it_has() {
        // The source has one more key ("extra", sorted before "next").
        let with_extra = |x: f32, n: i64| {
            let mut td = step(x, n);
            td.set("extra", Tensor::full(&[1], 7i64)).unwrap();
            td
        };
        let src = TensorDict::stack(&[with_extra(1.0, 4), with_extra(2.0, 5)]).unwrap();
        let mut dst = TensorDict::zeros_stacked(&step(0.0, 0), 3).unwrap();
        dst.fill_rows_from(&[2, 0], &src, &[0, 1]).unwrap();
        assert_eq!(dst.index(2).unwrap(), step(1.0, 4));
        assert_eq!(dst.index(0).unwrap(), step(2.0, 5));
        assert_eq!(dst.index(1).unwrap(), step(0.0, 0));
        // Exactly the same keys: as copy_rows.
        let same = TensorDict::stack(&[step(3.0, 6)]).unwrap();
        dst.fill_rows_from(&[1], &same, &[0]).unwrap();
        assert_eq!(dst.index(1).unwrap(), step(3.0, 6));
        // A key of the destination missing from the source is named.
        let mut fewer = TensorDict::stack(&[step(1.0, 1)]).unwrap();
        let key = fewer.keys(false, false)[0].clone();
        fewer.remove(&key);
        let err = dst.fill_rows_from(&[0], &fewer, &[0]).unwrap_err();
        assert!(err.to_string().contains(&key.to_string()), "{err}");
        assert!(dst.fill_rows_from(&[3], &src, &[0]).is_err());
        // An empty source: the first key is missing (no panic).
        let empty = TensorDict::new(&[1]);
        assert!(matches!(
            dst.fill_rows_from(&[0], &empty, &[0]),
            Err(TensorDictError::KeyNotFound { .. })
        ));
        // A nested dict without the key, and a dtype that differs.
        let mut nested_empty = TensorDict::new(&[1]);
        nested_empty
            .set(("next", "other"), Tensor::full(&[1, 1], 0i64))
            .unwrap();
        nested_empty
            .set("observation", Tensor::full(&[1, 3], 0f32))
            .unwrap();
        nested_empty
            .set(
                "env_index",
                NonTensor::Stack(vec![NonTensor::Int(0)].into()),
            )
            .unwrap();
        let err = dst.fill_rows_from(&[0], &nested_empty, &[0]).unwrap_err();
        assert!(err.to_string().contains("done"), "{err}");
        let mut wrong_dtype = TensorDict::stack(&[step(1.0, 1)]).unwrap();
        wrong_dtype
            .set("observation", Tensor::full(&[1, 3], 0f64))
            .unwrap();
        assert!(dst.fill_rows_from(&[0], &wrong_dtype, &[0]).is_err());
        // Non-tensor stacks take their rows too.
        let ints = TensorDict::stack(&[with_extra(5.0, 42)]).unwrap();
        dst.fill_rows_from(&[1], &ints, &[0]).unwrap();
        assert_eq!(dst.index(1).unwrap(), step(5.0, 42));
    }

    #[test]
    fn writing_a_row_of_a_batch_someone_holds_copies_first() {
        let mut batch = TensorDict::zeros_stacked(&step(0.0, 0), 2).unwrap();
        let held = batch.clone();
        batch.write_row(0, &step(7.0, 0)).unwrap();
        assert_eq!(
            held.tensor("observation").unwrap().to_vec::<f32>().unwrap(),
            vec![0.0; 6]
        );
        assert_eq!(
            batch
                .tensor("observation")
                .unwrap()
                .to_vec::<f32>()
                .unwrap()[0],
            7.0
        );
    }
}
