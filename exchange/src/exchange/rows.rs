//! Reads and writes of a pool's own buffers, resolved once for many
//! slots: one slot's result into an env's tensors ([`Exchange::read_into`]),
//! results into their rows of batch columns ([`Exchange::columns`],
//! [`Exchange::read_rows`]), and inputs from the rows of a batch
//! ([`Exchange::input_rows`], [`Exchange::write_input_row`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::SmallVec;
use tensordict::{Entry, Tensor, TensorDict};

use super::fields::{all_fields, assemble, fill_field, split_fields, stacked, Parts};
use super::{Exchange, READ_RETRIES};
use crate::error::{ReadError, WriteError};
use crate::layout::{slot_header, Area};
use crate::schema::{Field, Schema};
use crate::seqlock;
use crate::stats::now_ns;

/// What [`Exchange::read_into`] read from a slot, besides the tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRead {
    /// The slot's clock the read is consistent with: pass it as `after` to
    /// the next read to get only a newer result.
    pub clock: u64,
    /// When the worker published it (nanoseconds of the monotonic clock).
    pub published_ns: u64,
    /// Which fields of the result schema it published (bit `i`: field `i`).
    pub result_mask: u64,
    /// Which fields of the next schema it published.
    pub next_mask: u64,
}

/// The columns of a batch laid out as an area's fields (one tensor per
/// field, rows stacked; see [`Exchange::zeros_rows`]), borrowed to read
/// many slots' results into their rows with [`Exchange::read_rows`]:
/// resolved once for all of them, not once per result.
#[derive(Debug)]
pub struct Columns<'a> {
    /// The exchange that resolved them (its shared state's address).
    owner: usize,
    area: Area,
    rows: usize,
    parts: Parts<'a>,
}

/// The input fields of a batch of inputs, resolved once to write its rows
/// into many slots with [`Exchange::write_input_row`] (see
/// [`Exchange::input_rows`]).
#[derive(Debug)]
pub struct InputRows<'a> {
    /// The exchange that resolved them (its shared state's address).
    owner: usize,
    rows: usize,
    /// The number of fields of the input schema.
    fields: usize,
    /// Bit `i`: the batch has input field `i`.
    mask: u64,
    /// The columns of the fields present, in field order.
    parts: SmallVec<[&'a [u8]; 16]>,
}

impl InputRows<'_> {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Whether the batch has every field of the input schema.
    pub fn is_complete(&self) -> bool {
        self.mask == all_fields(self.fields)
    }
}

impl Columns<'_> {
    /// The area whose fields these are.
    pub fn area(&self) -> Area {
        self.area
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl Exchange {
    /// Copies `slot`'s result into `result` (and its next area into `next`)
    /// if the slot's clock is even and newer than `after`; `Ok(None)` when
    /// nothing newer is published, [`ReadError::Busy`] while its writer is
    /// mid-write (or wrote again during every attempt). Parent side, for a
    /// reader that keeps its own account of what it took (per-slot owners
    /// on several threads): nothing is recorded here; see
    /// [`Exchange::record_received`].
    ///
    /// `result` and `next` hold every key of their schemas with its dtype
    /// and shape (build them with [`Schema::zeros`]); the keys the worker
    /// did not publish keep their values. A buffer that does not fit a
    /// published field is a [`ReadError::Schema`] error, after the fields
    /// before the misfit were copied (each published field is looked up
    /// once, checked and copied: the lookups were most of a pool's
    /// receive).
    pub fn read_into(
        &self,
        slot: usize,
        after: u64,
        result: &mut TensorDict,
        next: &mut TensorDict,
    ) -> Result<Option<SlotRead>, ReadError> {
        thread_local! {
            /// The bytes of one slot's result and next areas, copied under
            /// the clock before they go into the caller's tensors.
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        self.check_read_slot(slot)?;
        let shared = &*self.shared;
        match seqlock::read_begin(shared.clock(slot)) {
            Some(clock) if clock > after => {}
            Some(_) => return Ok(None),
            None => return Err(ReadError::Busy { slot }),
        }
        let result_schema = shared.layout.schema(Area::Result);
        let next_schema = shared.layout.schema(Area::Next);
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let sizes = |schema: &Schema| schema.fields().iter().map(Field::nbytes).sum::<usize>();
            let result_len = sizes(result_schema);
            scratch.clear();
            scratch.resize(result_len + sizes(next_schema), 0);
            let (result_bytes, next_bytes) = scratch.split_at_mut(result_len);
            let mut result_parts = split_fields(result_schema, result_bytes);
            let mut next_parts = split_fields(next_schema, next_bytes);
            let snap = shared
                .read_slot(slot, 0, &mut result_parts, &mut next_parts, READ_RETRIES)
                .map_err(|_| ReadError::Busy { slot })?;
            if snap.clock <= after {
                return Ok(None);
            }
            // Each published field must be a tensor of the schema's dtype
            // and shape in the caller's tensordicts, and is copied there
            // (the others are not looked at: a step publishes no root).
            for (area, schema, td, parts, mask) in [
                (
                    Area::Result,
                    result_schema,
                    result,
                    &result_parts,
                    snap.result_mask,
                ),
                (Area::Next, next_schema, next, &next_parts, snap.next_mask),
            ] {
                for (i, (field, part)) in schema.fields().iter().zip(parts).enumerate() {
                    if mask & (1 << i) == 0 {
                        continue;
                    }
                    fill_field(schema, field, td, |bytes| bytes.copy_from_slice(part))
                        .map_err(|source| ReadError::Schema { slot, area, source })?;
                }
            }
            Ok(Some(SlotRead {
                clock: snap.clock,
                published_ns: snap.published_ns,
                result_mask: snap.result_mask,
                next_mask: snap.next_mask,
            }))
        })
    }

    /// A batch of `rows` rows of `area`'s fields, zeros: every field of the
    /// schema as a tensor of shape `[rows, ..]` (sub-dicts as the schema
    /// has them), for [`Exchange::columns`] and [`Exchange::read_rows`]. An
    /// error if a column's size overflows.
    pub fn zeros_rows(&self, area: Area, rows: usize) -> Result<TensorDict, ReadError> {
        let schema = self.shared.layout.schema(area);
        let columns = schema
            .fields()
            .iter()
            .map(|field| Tensor::try_zeros(field.dtype(), &stacked(Some(rows), field.shape())))
            .collect::<Result<Vec<Tensor>, _>>()
            .map_err(|err| ReadError::Columns {
                area,
                reason: format!("{rows} rows: {err}"),
            })?;
        Ok(assemble(
            schema,
            Some(rows),
            columns,
            all_fields(schema.len()),
        ))
    }

    /// The address of this exchange's shared state: what columns and input
    /// rows it resolved are checked against.
    fn owner(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    /// The columns of `batch`, a batch made by [`Exchange::zeros_rows`] for
    /// `area` (its tensors in the schema's field order), to read results
    /// into: each tensor made writable once (copied first if someone else
    /// holds it). An error if `batch` does not have one tensor per field
    /// with the field's dtype and `rows` rows of its shape.
    pub fn columns<'a>(
        &self,
        area: Area,
        batch: &'a mut TensorDict,
    ) -> Result<Columns<'a>, ReadError> {
        let schema = self.shared.layout.schema(area);
        let rows = batch.batch_size().first().copied().unwrap_or(0);
        let tensors = batch.tensors_mut();
        if tensors.len() != schema.len() {
            return Err(ReadError::Columns {
                area,
                reason: format!(
                    "{} tensors for the {} fields of the schema",
                    tensors.len(),
                    schema.len()
                ),
            });
        }
        let mut parts = Parts::with_capacity(tensors.len());
        for (field, tensor) in schema.fields().iter().zip(tensors) {
            if tensor.dtype() != field.dtype()
                || tensor.shape().first() != Some(&rows)
                || tensor.shape()[1..] != *field.shape()
            {
                return Err(ReadError::Columns {
                    area,
                    reason: format!(
                        "key {}: a {} tensor of shape {:?}, not {rows} rows of {} {:?}",
                        field.key(),
                        tensor.dtype(),
                        tensor.shape(),
                        field.dtype(),
                        field.shape()
                    ),
                });
            }
            parts.push(tensor.bytes_mut());
        }
        Ok(Columns {
            owner: self.owner(),
            area,
            rows,
            parts,
        })
    }

    /// Whether `slot` holds a result published after clock `after` (or is
    /// being written): a cheap look before [`Exchange::read_rows`].
    ///
    /// # Panics
    /// If `slot` is not below [`Exchange::slots`].
    pub fn published_after(&self, slot: usize, after: u64) -> bool {
        // Relaxed: a hint; the read that follows validates what it reads.
        self.shared.clock(slot).load(Ordering::Relaxed) > after
    }

    /// Reads the result published in `slot` after clock `after` (`Ok(None)`
    /// if there is none yet) into row `row` of `result` and `next` (columns
    /// of the result and next areas): the fields the worker published,
    /// copied under the slot's clock; the others keep their values. No
    /// scratch copy: while the slot is mid-write (`ReadError::Busy`), the
    /// row may be left half-written, to be read again.
    pub fn read_rows(
        &self,
        slot: usize,
        after: u64,
        row: usize,
        result: &mut Columns<'_>,
        next: &mut Columns<'_>,
    ) -> Result<Option<SlotRead>, ReadError> {
        self.check_read_slot(slot)?;
        for (owner, area) in [(result.owner, Area::Result), (next.owner, Area::Next)] {
            if owner != self.owner() {
                return Err(ReadError::Columns {
                    area,
                    reason: "resolved by another exchange".into(),
                });
            }
        }
        for (given, rows, area) in [
            (result.area, result.rows, Area::Result),
            (next.area, next.rows, Area::Next),
        ] {
            if given != area {
                return Err(ReadError::Columns {
                    area,
                    reason: format!("given the columns of the {given} area"),
                });
            }
            if row >= rows {
                return Err(ReadError::Columns {
                    area,
                    reason: format!("row {row} of {rows} rows"),
                });
            }
        }
        let shared = &*self.shared;
        match seqlock::read_begin(shared.clock(slot)) {
            Some(clock) if clock > after => {}
            Some(_) => return Ok(None),
            None => return Err(ReadError::Busy { slot }),
        }
        let snap = shared
            .read_slot(slot, row, &mut result.parts, &mut next.parts, READ_RETRIES)
            .map_err(|_| ReadError::Busy { slot })?;
        if snap.clock <= after {
            return Ok(None);
        }
        Ok(Some(SlotRead {
            clock: snap.clock,
            published_ns: snap.published_ns,
            result_mask: snap.result_mask,
            next_mask: snap.next_mask,
        }))
    }

    /// Records a batch taken with [`Exchange::read_into`] in the statistics:
    /// each slot with the publish time its read returned, the batch's
    /// `max_get` (its capacity; `None`: as many as taken), and whether the
    /// next command posted to each slot answers this batch (see
    /// [`Receive::track_action`](super::Receive::track_action)).
    pub fn record_received(
        &self,
        taken: &[(usize, u64)],
        max_get: Option<usize>,
        track_action: bool,
    ) {
        self.lock_stats()
            .record_received(now_ns(), taken.iter().copied(), max_get, track_action);
    }

    /// The input fields of `batch`, a batch of inputs of `[rows, ..]` (the
    /// first dim of its batch size): at each key of the input schema it
    /// has, a tensor of the field's dtype and `rows` rows of its shape; its
    /// other keys are not looked at. Resolved once, to write row after row
    /// into slots with [`Exchange::write_input_row`]. An error names the
    /// first key whose dtype or shape differs.
    pub fn input_rows<'a>(&self, batch: &'a TensorDict) -> Result<InputRows<'a>, WriteError> {
        let schema = self.shared.layout.schema(Area::Input);
        let rows = batch.batch_size().first().copied().unwrap_or(0);
        let mut inputs = InputRows {
            owner: self.owner(),
            rows,
            fields: schema.len(),
            mask: 0,
            parts: SmallVec::new(),
        };
        for (i, field) in schema.fields().iter().enumerate() {
            let Some(Entry::Tensor(t)) = batch.get(field.key()) else {
                continue;
            };
            if t.dtype() != field.dtype()
                || t.shape().first() != Some(&rows)
                || t.shape()[1..] != *field.shape()
            {
                return Err(WriteError::InputRows {
                    reason: format!(
                        "key {}: a {} tensor of shape {:?}, not {rows} rows of {} {:?}",
                        field.key(),
                        t.dtype(),
                        t.shape(),
                        field.dtype(),
                        field.shape()
                    ),
                });
            }
            inputs.mask |= 1 << i;
            inputs.parts.push(t.as_bytes());
        }
        Ok(inputs)
    }

    /// Writes row `row` of `inputs` into `slot`'s input area (parent side),
    /// as [`Exchange::write_input`] writes one input: the fields the batch
    /// has (the slot records which), before [`Exchange::post`]. An error for
    /// a row past the last, a slot out of range, or a command still pending.
    pub fn write_input_row(
        &self,
        slot: usize,
        inputs: &InputRows<'_>,
        row: usize,
    ) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        if inputs.owner != self.owner() {
            return Err(WriteError::InputRows {
                reason: "resolved by another exchange".into(),
            });
        }
        if row >= inputs.rows {
            return Err(WriteError::InputRows {
                reason: format!("row {row} of {} rows", inputs.rows),
            });
        }
        if let Some(pending) = self.pending_command(slot) {
            return Err(WriteError::CommandPending { slot, pending });
        }
        let shared = &*self.shared;
        // Relaxed: published with the input by the Release exchange in
        // `command::post`.
        shared
            .word64(slot, slot_header::INPUT_KEYS_OFFSET)
            .store(inputs.mask, Ordering::Relaxed);
        let fields = shared.layout.schema(Area::Input).fields();
        let written = (0..fields.len()).filter(|&i| inputs.mask & (1 << i) != 0);
        for (i, column) in written.zip(&inputs.parts) {
            let n = fields[i].nbytes();
            shared.store_field(
                shared.layout.field_offset(slot, Area::Input, i),
                &column[row * n..(row + 1) * n],
                fields[i].is_sized(),
            );
        }
        Ok(())
    }
}
