//! What one receive took ([`Received`]: the slots, a dense batch, the
//! clocks) and lazy views of its results ([`SlotView`]) that re-read a
//! slot while it still holds the result taken, and fail once it moved on.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tensordict::TensorDict;

use super::access::{Shared, Snapshot};
use crate::error::ReadError;
use crate::layout::Area;
use crate::seqlock;

/// The results one [`Exchange::receive`](super::Exchange::receive) took:
/// their slots (sorted), a dense batch of their results (and of their next
/// roots, when the exchange has a next area), and lazy views that re-read a
/// slot while it still holds the result taken.
///
/// The batch has batch size `[k, ..]` (`k` results, then the result
/// schema's batch size) and the slot indices under
/// [`SLOT_KEY`](crate::SLOT_KEY). It holds every key that at least one of
/// the results published; when results published different keys (a reset's
/// beside a step's), [`Received::row`] gives each row with exactly its own.
#[derive(Debug)]
pub struct Received {
    pub(super) slots: Vec<usize>,
    pub(super) snaps: Vec<Snapshot>,
    pub(super) batch: TensorDict,
    pub(super) next: Option<TensorDict>,
    pub(super) shared: Arc<Shared>,
}

impl Received {
    /// The slots taken, in increasing order: row `j` of the batch is slot
    /// `slots()[j]`.
    pub fn slots(&self) -> &[usize] {
        &self.slots
    }

    /// Number of results taken (at least 1).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Never true: a receive takes at least one result.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The readiness clock of each result taken (even; it counts a slot's
    /// publications twice over), in the order of [`Received::slots`].
    pub fn clocks(&self) -> Vec<u64> {
        self.snaps.iter().map(|s| s.clock).collect()
    }

    /// The results, stacked: batch size `[k, ..]`, slot indices under
    /// [`SLOT_KEY`](crate::SLOT_KEY).
    pub fn batch(&self) -> &TensorDict {
        &self.batch
    }

    /// The next roots published with
    /// [`Exchange::publish_pair`](super::Exchange::publish_pair), stacked as
    /// the batch; `None` when the exchange has no next area.
    pub fn next(&self) -> Option<&TensorDict> {
        self.next.as_ref()
    }

    /// The batch and the next roots.
    pub fn into_parts(self) -> (TensorDict, Option<TensorDict>) {
        (self.batch, self.next)
    }

    /// Row `j` of the batch with exactly the keys its worker published (and
    /// its slot under [`SLOT_KEY`](crate::SLOT_KEY)). Copies nothing: its
    /// tensors are views of the batch's.
    ///
    /// # Panics
    /// If `j` is not below [`Received::len`].
    pub fn row(&self, j: usize) -> TensorDict {
        let mut row = self.batch.index(j).expect("row index in range");
        let schema = self.shared.layout.schema(Area::Result);
        for (i, field) in schema.fields().iter().enumerate() {
            if self.snaps[j].result_mask & (1 << i) == 0 {
                row.remove(field.key());
            }
        }
        row
    }

    /// A lazy view of result `j`: it re-reads the slot on demand, and fails
    /// with [`ReadError::Stale`] once the slot was written again.
    ///
    /// # Panics
    /// If `j` is not below [`Received::len`].
    pub fn view(&self, j: usize) -> SlotView {
        SlotView {
            shared: Arc::clone(&self.shared),
            slot: self.slots[j],
            clock: self.snaps[j].clock,
        }
    }

    /// A view of every result taken, in the order of [`Received::slots`].
    pub fn views(&self) -> impl ExactSizeIterator<Item = SlotView> + '_ {
        (0..self.len()).map(|j| self.view(j))
    }
}

/// A lazy view of one received result: the slot and the clock of the
/// result taken. Reading copies the slot's bytes again, and is an error
/// ([`ReadError::Stale`]) once the slot was written again (or is being
/// written): never another result's data.
#[derive(Clone, Debug)]
pub struct SlotView {
    shared: Arc<Shared>,
    slot: usize,
    clock: u64,
}

impl SlotView {
    /// The slot.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The clock of the result the view is of.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// True once the slot was written again: reading fails.
    pub fn is_stale(&self) -> bool {
        seqlock::read_begin(self.shared.clock(self.slot)) != Some(self.clock)
    }

    /// The result, as a row with the keys its worker published and its slot
    /// under [`SLOT_KEY`](crate::SLOT_KEY).
    pub fn read(&self) -> Result<TensorDict, ReadError> {
        self.read_both(false).map(|(result, _)| result)
    }

    /// The result and the next root published with it (empty of tensors if
    /// it was published without one).
    pub fn read_pair(&self) -> Result<(TensorDict, TensorDict), ReadError> {
        self.read_both(true)
            .map(|(result, next)| (result, next.expect("asked for")))
    }

    fn read_both(&self, want_next: bool) -> Result<(TensorDict, Option<TensorDict>), ReadError> {
        let stale = || ReadError::Stale {
            slot: self.slot,
            seen: self.clock,
            // Relaxed: only reported.
            now: self.shared.clock(self.slot).load(Ordering::Relaxed),
        };
        if self.is_stale() {
            return Err(stale());
        }
        // One attempt: a write since the receive makes the view stale, and
        // retrying would only read the newer result.
        match self.shared.read_row(self.slot, want_next, 0) {
            Ok((snap, result, next)) if snap.clock == self.clock => Ok((result, next)),
            _ => Err(stale()),
        }
    }
}
