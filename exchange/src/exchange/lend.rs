//! A slot's areas lent to its worker: tensordicts whose tensors view the
//! slot's fields in place ([`tensordict::SharedBlock`]), so that an env
//! reads its action where the parent wrote it and writes its result where
//! the parent reads it, with no copy on the worker's side.
//!
//! # Protocol
//!
//! The worker lends each area once ([`Exchange::lend_area`]) and keeps the
//! tensordicts as the env's buffers. For each command it takes:
//! [`Exchange::begin_lent`] makes the slot's clock odd before the env
//! touches the views; the env reads the input views and writes the result
//! views with plain accesses; [`Exchange::publish_lent_at`] records the
//! keys present and the publish time, copies in the tensors that are not
//! the slot's own views (an env that replaced one), and makes the clock
//! even. A command that fails leaves the clock odd, as a writer that died
//! mid-write: readers see the slot busy (never a result) until the next
//! command's write starts, which carries on from the odd value.
//!
//! Why the plain accesses race with nothing:
//! - The parent writes a slot's input only between receiving its last
//!   result and posting its next command ([`Exchange::write_input`]), and
//!   the worker reads the input views only after taking that command (an
//!   Acquire swap that pairs with the post's Release).
//! - Only the worker writes the result and next areas. The parent reads
//!   them with relaxed atomics under the seqlock: a copy taken while the
//!   clock is odd (a lazy [`SlotView`](crate::SlotView) read while the
//!   next command runs) fails validation and is never returned. The plain
//!   stores come after the odd clock: `begin_write`'s Release fence orders
//!   them there for the hardware, and the compiler fence here keeps the
//!   compiler from moving them above it. They come before the even clock,
//!   whose Release store orders them before it.

use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::Arc;

use tensordict::{Entry, SharedBlock, Tensor, TensorDict};

use super::fields::{fields_of, Fields, Present};
use super::Exchange;
use crate::error::WriteError;
use crate::layout::{slot_header, Area};
use crate::seqlock;

/// A write of a slot's lent areas begun by [`Exchange::begin_lent`]: the
/// clock value that [`Exchange::publish_lent_at`] ends it from. Dropped
/// without a publish, it leaves the slot busy until the next write.
#[derive(Debug)]
#[must_use = "a lent write that is never published leaves its slot busy"]
pub struct LentWrite {
    slot: usize,
    start: u64,
}

impl Exchange {
    /// The region as a block that tensors view in place, made on first use.
    fn block(&self) -> &SharedBlock {
        self.lent.get_or_init(|| {
            let region = &self.shared.region;
            let ptr = std::ptr::NonNull::new(region.as_ptr()).expect("a mapping is never null");
            let keeper: Arc<dyn Send + Sync> = Arc::clone(&self.shared) as _;
            // SAFETY: the mapping starts on a page (8-byte aligned), its
            // `len` bytes are initialized (a file's pages), readable and
            // writable from any thread while `Shared`, which owns the
            // region and is the keeper, lives. The crate reaches the
            // mapping through raw pointers and atomics only (`region`).
            unsafe { SharedBlock::new(ptr, region.len(), keeper) }
        })
    }

    /// `template` with each of its tensors replaced by the view of its
    /// field in `slot`'s `area` (worker side, once per area, before the
    /// first command): the buffer an env then reads (input) or writes
    /// (result, next) in place. The views of the result and next areas
    /// start as the template's values (nothing reads those areas before a
    /// publish); those of the input area as the area holds them (the
    /// parent may be writing it: zeros until it does, as a schema's
    /// [`zeros`](crate::Schema::zeros)). `None` if `template` has a leaf
    /// that is not a tensor of one of the area's fields with its dtype
    /// and shape: such a buffer is copied ([`Exchange::publish`]).
    ///
    /// # Panics
    /// If `slot` is not below [`Exchange::slots`].
    ///
    /// # Safety
    /// The slot's areas are lent once, by the slot's one worker, in all
    /// processes that map the region; the views are used only between
    /// [`Exchange::begin_lent`] and [`Exchange::publish_lent_at`] of the
    /// commands that worker takes, and the parent keeps to the protocol
    /// of the module (`lend`).
    pub unsafe fn lend_area(
        &self,
        slot: usize,
        area: Area,
        template: &TensorDict,
    ) -> Option<TensorDict> {
        assert!(slot < self.slots(), "slot {slot} of {}", self.slots());
        let layout = &self.shared.layout;
        let schema = layout.schema(area);
        let base = layout.area_offset(slot, area);
        let mut lent = template.clone();
        for (key, entry) in template.items(true, true) {
            let Entry::Tensor(t) = entry else {
                return None;
            };
            let i = schema.position(&key)?;
            let field = &schema.fields()[i];
            if t.dtype() != field.dtype() || t.shape() != field.shape() {
                return None;
            }
            let offset = base + layout.field_offsets(area)[i];
            // SAFETY: the one view of this field (each key once in the
            // template, each field its own bytes); used as the caller
            // promises, which the module's protocol makes race-free.
            let mut view = unsafe { self.block().view(field.dtype(), field.shape(), offset) }
                .expect("a field lies inside the region, aligned");
            if area != Area::Input {
                view.copy_from(t).expect("the field's dtype and shape");
            }
            lent.set(&key, view).expect("the template's key and shape");
        }
        Some(lent)
    }

    /// Starts the write of `slot`'s lent areas for the command just taken
    /// (worker side), before the env touches its views: the slot's clock
    /// goes odd.
    ///
    /// # Panics
    /// If `slot` is not below [`Exchange::slots`].
    pub fn begin_lent(&self, slot: usize) -> LentWrite {
        assert!(slot < self.slots(), "slot {slot} of {}", self.slots());
        let start = seqlock::begin_write(self.shared.clock(slot));
        // The env's plain stores to the views stay after the odd clock.
        compiler_fence(Ordering::SeqCst);
        LentWrite { slot, start }
    }

    /// Publishes the write begun by [`Exchange::begin_lent`] without ringing
    /// the bell (as [`Exchange::publish_quiet_at`]): `result` (none: a
    /// reset's empty result) and `next` as the lent buffers hold them.
    /// The slot's own views are already in place; any other tensor (one an
    /// env set in place of its view) is copied in. The same checks and
    /// errors as [`Exchange::publish`]; after an error the slot stays busy
    /// until the next write.
    pub fn publish_lent_at(
        &self,
        write: LentWrite,
        result: Option<&TensorDict>,
        next: Option<&TensorDict>,
        published_ns: u64,
    ) -> Result<(), WriteError> {
        let LentWrite { slot, start } = write;
        let shared = &*self.shared;
        let mut masks = [0u64; 2];
        for ((area, td), mask) in [(Area::Result, result), (Area::Next, next)]
            .into_iter()
            .zip(&mut masks)
        {
            let Some(td) = td else { continue };
            *mask =
                match self.lent_in_order(slot, area, td) {
                    Some(mask) => mask,
                    None => {
                        let schema = shared.layout.schema(area);
                        let fields = fields_of(schema, td)
                            .map_err(|source| WriteError::Schema { slot, area, source })?;
                        self.write_others(slot, area, &fields);
                        fields.mask(schema.len())
                    }
                };
        }
        compiler_fence(Ordering::SeqCst);
        // Relaxed: inside the write, ordered by the clock.
        shared
            .word64(slot, slot_header::RESULT_KEYS_OFFSET)
            .store(masks[0], Ordering::Relaxed);
        shared
            .word64(slot, slot_header::NEXT_KEYS_OFFSET)
            .store(masks[1], Ordering::Relaxed);
        shared
            .word64(slot, slot_header::PUBLISHED_NS_OFFSET)
            .store(published_ns, Ordering::Relaxed);
        seqlock::end_write(shared.clock(slot), start);
        Ok(())
    }

    /// The keys-present mask of `td` if it is flat and holds exactly the
    /// area's fields in order, each the slot's own view (what a lent
    /// buffer holds on every publish): nothing to check or copy.
    fn lent_in_order(&self, slot: usize, area: Area, td: &TensorDict) -> Option<u64> {
        let layout = &self.shared.layout;
        let offsets = layout.field_offsets(area);
        let base = layout.area_offset(slot, area);
        let block = self.lent.get()?;
        let all = td.len() == offsets.len()
            && offsets.len() <= 64
            && td.iter().zip(offsets).all(|((_, entry), &offset)| {
                matches!(entry, Entry::Tensor(t) if block.is_view(t, base + offset))
            });
        all.then(|| super::fields::all_fields(offsets.len()))
    }

    /// Copies the tensors of `fields` into `slot`'s `area`, but for those
    /// that are the slot's own views (in place already).
    fn write_others(&self, slot: usize, area: Area, fields: &Fields<'_>) {
        let layout = &self.shared.layout;
        let offsets = layout.field_offsets(area);
        let base = layout.area_offset(slot, area);
        let own = |i: usize, t: &Tensor| {
            self.lent
                .get()
                .is_some_and(|b| b.is_view(t, base + offsets[i]))
        };
        let mask = fields.mask(layout.schema(area).len());
        let present: Present<'_> = match fields {
            Fields::InOrder(td) => super::fields::tensors_in_order(td).collect(),
            Fields::Present(_, present) => present.clone(),
        };
        let written = (0..offsets.len()).filter(|&i| mask & (1 << i) != 0);
        let mut others = 0u64;
        let mut copied = Present::new();
        for (i, t) in written.zip(present) {
            if !own(i, t) {
                others |= 1 << i;
                copied.push(t);
            }
        }
        self.write_fields(slot, area, &Fields::Present(others, copied));
    }
}
