//! The publish path (worker to parent): a result (and a next root) copied
//! into a slot under its seqlock clock with the keys present and the
//! publish time, then the consumer's bell rung (`futex::bell`).

use std::sync::atomic::Ordering;

use tensordict::TensorDict;

use super::fields::{fields_of, Fields, Present};
use super::Exchange;
use crate::error::WriteError;
use crate::futex::bell;
use crate::layout::{slot_header, Area};
use crate::seqlock;
use crate::stats::now_ns;

impl Exchange {
    /// Publishes `result` in `slot` (worker side): clock odd, keys present,
    /// publish time and tensors in, clock even, the consumer's bell rung.
    /// `result` has the result schema's batch size and, at each key it has,
    /// the schema's dtype and shape; it may leave keys out (a reset's result
    /// beside a step's). The slot's next area is marked empty.
    pub fn publish(&self, slot: usize, result: &TensorDict) -> Result<(), WriteError> {
        self.publish_areas(slot, result, None, true, None)
    }

    /// Publishes as [`Exchange::publish`] (with `next`: as
    /// [`Exchange::publish_pair`]) without ringing the bell: for a writer
    /// that publishes several slots in a row and rings once
    /// ([`Exchange::ring`]), so that a sleeping reader wakes once. The
    /// result is visible to readers at once; only their wake-up waits for
    /// the ring.
    pub fn publish_quiet(
        &self,
        slot: usize,
        result: &TensorDict,
        next: Option<&TensorDict>,
    ) -> Result<(), WriteError> {
        self.publish_areas(slot, result, next, false, None)
    }

    /// [`Exchange::publish_quiet`] with the publish time given
    /// (`published_ns`, of [`now_ns`](crate::now_ns)'s clock), for a writer
    /// that reads the clock anyway: it then reads it once per result.
    pub fn publish_quiet_at(
        &self,
        slot: usize,
        result: &TensorDict,
        next: Option<&TensorDict>,
        published_ns: u64,
    ) -> Result<(), WriteError> {
        self.publish_areas(slot, result, next, false, Some(published_ns))
    }

    /// Publishes `result` and `next` together in `slot` (step and maybe
    /// reset): as [`Exchange::publish`], with `next` in the next area under
    /// the same clock.
    pub fn publish_pair(
        &self,
        slot: usize,
        result: &TensorDict,
        next: &TensorDict,
    ) -> Result<(), WriteError> {
        self.publish_areas(slot, result, Some(next), true, None)
    }

    fn publish_areas(
        &self,
        slot: usize,
        result: &TensorDict,
        next: Option<&TensorDict>,
        ring: bool,
        published: Option<u64>,
    ) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        let shared = &*self.shared;
        let check = |area, td| {
            fields_of(shared.layout.schema(area), td).map_err(|source| WriteError::Schema {
                slot,
                area,
                source,
            })
        };
        let result_fields = check(Area::Result, result)?;
        let next_fields = match next {
            Some(next) => check(Area::Next, next)?,
            None => Fields::Present(0, Present::new()),
        };
        let result_mask = result_fields.mask(shared.layout.schema(Area::Result).len());
        let next_mask = next_fields.mask(shared.layout.schema(Area::Next).len());
        let published = published.unwrap_or_else(now_ns);
        let clock = shared.clock(slot);
        let start = seqlock::begin_write(clock);
        // Relaxed: inside the write, ordered by the clock (the fence in
        // `begin_write`, the Release store in `end_write`).
        shared
            .word64(slot, slot_header::RESULT_KEYS_OFFSET)
            .store(result_mask, Ordering::Relaxed);
        shared
            .word64(slot, slot_header::NEXT_KEYS_OFFSET)
            .store(next_mask, Ordering::Relaxed);
        shared
            .word64(slot, slot_header::PUBLISHED_NS_OFFSET)
            .store(published, Ordering::Relaxed);
        self.write_fields(slot, Area::Result, &result_fields);
        self.write_fields(slot, Area::Next, &next_fields);
        seqlock::end_write(clock, start);
        if ring {
            bell::ring(shared.bell());
        }
        Ok(())
    }

    /// Rings the consumer's bell without publishing: wakes the readers (for
    /// news that did not come through a slot, such as a worker's death).
    pub fn ring(&self) {
        bell::ring(self.shared.bell());
    }
}
