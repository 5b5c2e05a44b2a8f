//! The shared region and its layout (`Shared`): the slot words (clock,
//! command word, masks and times), the consumer's bell, and the field
//! copies that every path of the exchange goes through, bounds-checked by
//! the region.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tensordict::{Tensor, TensorDict};

use super::fields::{all_fields, assemble, columns, set_slots, tensors_in_order, Fields};
use super::Exchange;
use crate::layout::{control, slot_header, Area, Layout};
use crate::region::Region;
use crate::schema::{sized_len, SIZE_HEADER};
use crate::seqlock;

/// The region and its layout: what every `Exchange`, received batch and view
/// of one mapping shares.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) region: Region,
    pub(super) layout: Layout,
}

/// What one consistent read of a slot saw, besides the tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Snapshot {
    /// The clock the read is consistent with (even).
    pub(super) clock: u64,
    /// Keys-present mask of the result area (bits past its fields cleared).
    pub(super) result_mask: u64,
    /// Keys-present mask of the next area (bits past its fields cleared).
    pub(super) next_mask: u64,
    /// When the worker published it (`now_ns`).
    pub(super) published_ns: u64,
}

impl Shared {
    /// The `u64` header word at `offset` in `slot`'s header.
    pub(super) fn word64(&self, slot: usize, offset: usize) -> &AtomicU64 {
        self.region
            .atomic_u64(self.layout.slot_offset(slot) + offset)
            .expect("slot header words lie in the region, 8-aligned")
    }

    /// The readiness clock of `slot`.
    pub(super) fn clock(&self, slot: usize) -> &AtomicU64 {
        self.word64(slot, slot_header::CLOCK_OFFSET)
    }

    /// The command word of `slot`.
    pub(super) fn command(&self, slot: usize) -> &AtomicU32 {
        self.region
            .atomic_u32(self.layout.slot_offset(slot) + slot_header::COMMAND_OFFSET)
            .expect("the command word lies in the region, 4-aligned")
    }

    /// The consumer's bell, rung after every publication.
    pub(super) fn bell(&self) -> &AtomicU32 {
        self.region
            .atomic_u32(control::WAKE_OFFSET)
            .expect("the bell lies in the region, 4-aligned")
    }

    /// Copies `dst.len()` bytes of the region at `offset` into `dst` with
    /// relaxed atomic loads ([`Region::load`]).
    ///
    /// # Panics
    /// If the bytes are not all inside the region (the layout puts every
    /// field inside it, and `open` checks the mapping's length).
    #[inline]
    pub(super) fn load(&self, offset: usize, dst: &mut [u8]) {
        if let Err(err) = self.region.load(offset, dst) {
            panic!("a field of the layout: {err}");
        }
    }

    /// Copies `src` into the region at `offset` with relaxed atomic stores
    /// ([`Region::store`]).
    ///
    /// # Panics
    /// If the bytes are not all inside the region, as for `load`.
    #[inline]
    pub(super) fn store(&self, offset: usize, src: &[u8]) {
        if let Err(err) = self.region.store(offset, src) {
            panic!("a field of the layout: {err}");
        }
    }

    /// Copies a fixed-size field's bytes at `offset` into `dst` as whole
    /// words ([`Region::load_words`]): every field starts on an 8-byte
    /// boundary and its padding to the next belongs to no field. A
    /// length-prefixed field goes through [`Shared::load`] (its header, then
    /// the bytes it counts).
    #[inline]
    pub(super) fn load_field(&self, offset: usize, dst: &mut [u8]) {
        if let Err(err) = self.region.load_words(offset, dst) {
            panic!("a field of the layout: {err}");
        }
    }

    /// Copies `src` into a field at `offset`: as whole words
    /// ([`Region::store_words`]) for a fixed-size field (`sized` false),
    /// else byte-exact ([`Shared::store`]), so that each field is copied
    /// with one kind of access everywhere.
    #[inline]
    pub(super) fn store_field(&self, offset: usize, src: &[u8], sized: bool) {
        if sized {
            return self.store(offset, src);
        }
        if let Err(err) = self.region.store_words(offset, src) {
            panic!("a field of the layout: {err}");
        }
    }

    /// Copies the fields of `slot`'s `area` whose bits are set in `mask`
    /// into row `row` of `columns` (one per field of the area, each `rows`
    /// times the field's size): a length-prefixed field's header and the
    /// bytes it counts only (the rest of its row is left as it was).
    pub(super) fn copy_fields(
        &self,
        slot: usize,
        area: Area,
        mask: u64,
        row: usize,
        columns: &mut [&mut [u8]],
    ) {
        let fields = self.layout.schema(area).fields();
        // The slot checked once: each field's offset is then a sum.
        let base = self.layout.area_offset(slot, area);
        let offsets = self.layout.field_offsets(area);
        for (i, ((field, column), &at)) in fields
            .iter()
            .zip(columns.iter_mut())
            .zip(offsets)
            .enumerate()
        {
            if mask & (1 << i) != 0 {
                let n = field.nbytes();
                let offset = base + at;
                let dst = &mut column[row * n..(row + 1) * n];
                if field.is_sized() {
                    // The header, then what it counts (a torn header is
                    // bounded by the field, and the read is validated).
                    self.load(offset, &mut dst[..SIZE_HEADER]);
                    let len = sized_len(dst);
                    self.load(offset + SIZE_HEADER, &mut dst[SIZE_HEADER..len]);
                } else {
                    self.load_field(offset, dst);
                }
            }
        }
    }

    /// One consistent read of `slot`'s published result into row `row` of
    /// `result` (and of `next`, unless it is empty), trying up to
    /// `retries + 1` times.
    pub(super) fn read_slot(
        &self,
        slot: usize,
        row: usize,
        result: &mut [&mut [u8]],
        next: &mut [&mut [u8]],
        retries: u32,
    ) -> Result<Snapshot, seqlock::ReadError> {
        let mut snap = Snapshot::default();
        let clock = seqlock::read_consistent_with(self.clock(slot), retries, || {
            // Relaxed: inside the read; the clock validates them
            // (`read_begin`'s Acquire, `read_validate`'s fence).
            snap.result_mask = self
                .word64(slot, slot_header::RESULT_KEYS_OFFSET)
                .load(Ordering::Relaxed);
            snap.next_mask = self
                .word64(slot, slot_header::NEXT_KEYS_OFFSET)
                .load(Ordering::Relaxed);
            snap.published_ns = self
                .word64(slot, slot_header::PUBLISHED_NS_OFFSET)
                .load(Ordering::Relaxed);
            self.copy_fields(slot, Area::Result, snap.result_mask, row, result);
            if !next.is_empty() {
                self.copy_fields(slot, Area::Next, snap.next_mask, row, next);
            }
        })?;
        snap.clock = clock;
        snap.result_mask &= all_fields(self.layout.schema(Area::Result).len());
        snap.next_mask &= all_fields(self.layout.schema(Area::Next).len());
        Ok(snap)
    }

    /// One consistent read of `slot` as rows (the schemas' batch sizes):
    /// its result and, with `want_next`, its next, each with the keys the
    /// worker published and the slot under [`SLOT_KEY`](crate::SLOT_KEY).
    pub(super) fn read_row(
        &self,
        slot: usize,
        want_next: bool,
        retries: u32,
    ) -> Result<(Snapshot, TensorDict, Option<TensorDict>), seqlock::ReadError> {
        let result_schema = self.layout.schema(Area::Result);
        let next_schema = self.layout.schema(Area::Next);
        let mut result_cols = columns(result_schema, None);
        let mut next_cols = if want_next {
            columns(next_schema, None)
        } else {
            Vec::new()
        };
        let snap = {
            let mut result_bytes: Vec<&mut [u8]> =
                result_cols.iter_mut().map(Tensor::bytes_mut).collect();
            let mut next_bytes: Vec<&mut [u8]> =
                next_cols.iter_mut().map(Tensor::bytes_mut).collect();
            self.read_slot(slot, 0, &mut result_bytes, &mut next_bytes, retries)?
        };
        let mut result = assemble(result_schema, None, result_cols, snap.result_mask);
        set_slots(&mut result, &[slot], None, result_schema.batch_size());
        let next = want_next.then(|| {
            let mut next = assemble(next_schema, None, next_cols, snap.next_mask);
            set_slots(&mut next, &[slot], None, next_schema.batch_size());
            next
        });
        Ok((snap, result, next))
    }
}

impl Exchange {
    /// Writes `fields` (checked by `fields_of`) into `slot`'s `area`: of a
    /// length-prefixed field, the header and the bytes it counts only.
    pub(super) fn write_fields(&self, slot: usize, area: Area, fields: &Fields<'_>) {
        let mask = fields.mask(self.shared.layout.schema(area).len());
        match fields {
            Fields::InOrder(td) => self.write_tensors(slot, area, mask, tensors_in_order(td)),
            Fields::Present(_, present) => {
                self.write_tensors(slot, area, mask, present.iter().copied());
            }
        }
    }

    /// Writes `tensors` (one for each field of `mask`, in order) into
    /// `slot`'s `area`.
    fn write_tensors<'a>(
        &self,
        slot: usize,
        area: Area,
        mask: u64,
        tensors: impl Iterator<Item = &'a Tensor>,
    ) {
        let shared = &*self.shared;
        let fields = shared.layout.schema(area).fields();
        // The slot checked once: each field's offset is then a sum.
        let base = shared.layout.area_offset(slot, area);
        let offsets = shared.layout.field_offsets(area);
        let written = (0..fields.len()).filter(|&i| mask & (1 << i) != 0);
        for (i, tensor) in written.zip(tensors) {
            let bytes = tensor.as_bytes();
            let sized = fields[i].is_sized();
            let bytes = if sized {
                &bytes[..sized_len(bytes)]
            } else {
                bytes
            };
            shared.store_field(base + offsets[i], bytes, sized);
        }
    }
}
