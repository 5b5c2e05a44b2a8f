//! Receives (parent side): [`Receive`]'s `min_get`, `max_get` and
//! deadline; a scan of the slots' clocks after a bell ticket, validated
//! copies of the slots taken, and sleep on the bell until enough are ready;
//! a receive of one slot's result; the bell for readers that check the
//! slots themselves.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensordict::{Tensor, TensorDict};

use super::fields::{assemble, columns, set_slots};
use super::received::Received;
use super::{Exchange, READ_RETRIES, SPIN};
use crate::error::ReadError;
use crate::futex::bell;
use crate::layout::{slot_header, Area};
use crate::seqlock;
use crate::stats::now_ns;

/// What [`Exchange::receive`] waits for and takes.
///
/// ```
/// use exchange::Receive;
/// use std::time::Duration;
/// let recv = Receive::new().min_get(2).max_get(4).timeout(Duration::from_millis(5));
/// assert_eq!((recv.min_get, recv.max_get), (2, Some(4)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receive {
    /// The least number of results to return: a hard lower bound (default
    /// 1).
    pub min_get: usize,
    /// The most results to return (default: all that are ready); when more
    /// are ready, the oldest publications are taken.
    pub max_get: Option<usize>,
    /// A deadline for the whole call, from entry. `None` waits as long as it
    /// takes; zero polls. With a timeout, the call returns once `max_get`
    /// results (or every slot's) are ready, or at the deadline with what is
    /// ready (at least `min_get`); without one, as soon as `min_get` are
    /// ready, with all that are ready then (up to `max_get`).
    pub timeout: Option<Duration>,
    /// Counts the time from this receive to the next command posted to each
    /// slot taken, for the batch-to-action latency and the consumer busy
    /// fraction (default true; TorchRL tracks step results, not resets).
    pub track_action: bool,
}

impl Default for Receive {
    fn default() -> Self {
        Receive {
            min_get: 1,
            max_get: None,
            timeout: None,
            track_action: true,
        }
    }
}

impl Receive {
    /// `min_get` 1, no `max_get`, no timeout, tracking actions.
    pub fn new() -> Receive {
        Receive::default()
    }

    /// Sets `min_get`.
    pub fn min_get(mut self, min_get: usize) -> Receive {
        self.min_get = min_get;
        self
    }

    /// Sets `max_get`.
    pub fn max_get(mut self, max_get: usize) -> Receive {
        self.max_get = Some(max_get);
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Receive {
        self.timeout = Some(timeout);
        self
    }

    /// Sets whether the receive tracks the actions that answer it.
    pub fn track_action(mut self, track_action: bool) -> Receive {
        self.track_action = track_action;
        self
    }
}

impl Exchange {
    /// The clock of `slot`'s result if one newer than the last taken is
    /// published; `Err(())` while a write is under way.
    fn fresh(&self, slot: usize) -> Result<Option<u64>, ()> {
        match seqlock::read_begin(self.shared.clock(slot)) {
            Some(clock) if clock > self.taken[slot] => Ok(Some(clock)),
            Some(_) => Ok(None),
            None => Err(()),
        }
    }

    /// Waits for results and takes them (parent side): at least
    /// `recv.min_get`, at most `recv.max_get`, within `recv.timeout` from
    /// entry (see [`Receive`]). A result is the latest one published in a
    /// slot, newer than the last this reader took from it; it is copied with
    /// a validated seqlock read, so it is never torn.
    ///
    /// Errors: `min_get` of 0, `max_get` below `min_get`, `min_get` above
    /// the number of slots; [`ReadError::Timeout`] when the deadline passes
    /// with fewer than `min_get` ready. Then nothing is taken: the results
    /// stay for the next call.
    pub fn receive(&mut self, recv: Receive) -> Result<Received, ReadError> {
        let start = Instant::now();
        if recv.min_get < 1 {
            return Err(ReadError::MinGet {
                min_get: recv.min_get,
            });
        }
        if let Some(max_get) = recv.max_get {
            if max_get < recv.min_get {
                return Err(ReadError::MaxGet {
                    min_get: recv.min_get,
                    max_get,
                });
            }
        }
        let slots = self.slots();
        if recv.min_get > slots {
            return Err(ReadError::MinGetAboveSlots {
                min_get: recv.min_get,
                slots,
            });
        }
        // A timeout too long to represent is no deadline.
        let deadline = recv.timeout.and_then(|t| start.checked_add(t));
        let limit = recv.max_get.unwrap_or(usize::MAX);
        let shared = Arc::clone(&self.shared);
        let mut ready = Vec::with_capacity(slots);
        let mut chosen = Vec::with_capacity(slots);
        loop {
            // Taken before the clocks are read: a publication after this
            // point rings the bell and ends the wait below.
            let ticket = bell::listen(shared.bell());
            ready.clear();
            let mut busy = 0;
            for slot in 0..slots {
                match self.fresh(slot) {
                    Ok(Some(_)) => ready.push(slot),
                    Ok(None) => {}
                    Err(()) => busy += 1,
                }
            }
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            // Decides on this scan; a slot that cannot be copied (written
            // again meanwhile) leaves it, and the decision is made again
            // without it: each pass ends, at the latest, with the slots.
            loop {
                let enough = ready.len() >= recv.min_get;
                let no_more_coming = ready.len() == slots;
                if !(enough
                    && (deadline.is_none()
                        || ready.len() >= limit
                        || past_deadline
                        || no_more_coming))
                {
                    break;
                }
                chosen.clone_from(&ready);
                if chosen.len() > limit {
                    // The oldest publications first (as a completion queue
                    // gives them), then in slot order. Relaxed: a hint for
                    // the choice; the copy reads the time under the clock.
                    chosen.sort_by_key(|&slot| {
                        shared
                            .word64(slot, slot_header::PUBLISHED_NS_OFFSET)
                            .load(Ordering::Relaxed)
                    });
                    chosen.truncate(limit);
                    chosen.sort_unstable();
                }
                match self.take(&chosen, &recv) {
                    Ok(received) => return Ok(received),
                    Err(failed) => {
                        // Busy now, or holding a newer result: its writer
                        // rings when done, and the next pass looks again.
                        ready.retain(|&slot| slot != failed);
                        busy += 1;
                    }
                }
            }
            if past_deadline {
                return Err(ReadError::Timeout {
                    timeout: recv.timeout.unwrap_or(Duration::ZERO),
                    ready: ready.len(),
                    min_get: recv.min_get,
                    busy,
                });
            }
            bell::wait_bell(shared.bell(), ticket, deadline, SPIN);
        }
    }

    /// Copies the results of `chosen` (sorted slots, each with a fresh
    /// result) into a batch and marks them taken; or, with nothing taken,
    /// the first slot that could not be copied consistently.
    fn take(&mut self, chosen: &[usize], recv: &Receive) -> Result<Received, usize> {
        let shared = Arc::clone(&self.shared);
        let result_schema = shared.layout.schema(Area::Result);
        let next_schema = shared.layout.schema(Area::Next);
        let k = chosen.len();
        let mut result_cols = columns(result_schema, Some(k));
        let mut next_cols = columns(next_schema, Some(k));
        let mut snaps = Vec::with_capacity(k);
        {
            let mut result_bytes: Vec<&mut [u8]> =
                result_cols.iter_mut().map(Tensor::bytes_mut).collect();
            let mut next_bytes: Vec<&mut [u8]> =
                next_cols.iter_mut().map(Tensor::bytes_mut).collect();
            for (row, &slot) in chosen.iter().enumerate() {
                match shared.read_slot(slot, row, &mut result_bytes, &mut next_bytes, READ_RETRIES)
                {
                    Ok(snap) if snap.clock > self.taken[slot] => snaps.push(snap),
                    _ => return Err(slot),
                }
            }
        }
        let now = now_ns();
        let result_mask = snaps.iter().fold(0, |mask, s| mask | s.result_mask);
        let mut batch = assemble(result_schema, Some(k), result_cols, result_mask);
        set_slots(&mut batch, chosen, Some(k), result_schema.batch_size());
        let next = (!next_schema.is_empty()).then(|| {
            let next_mask = snaps.iter().fold(0, |mask, s| mask | s.next_mask);
            let mut next = assemble(next_schema, Some(k), next_cols, next_mask);
            set_slots(&mut next, chosen, Some(k), next_schema.batch_size());
            next
        });
        for (&slot, snap) in chosen.iter().zip(&snaps) {
            self.taken[slot] = snap.clock;
        }
        self.lock_stats().record_received(
            now,
            chosen
                .iter()
                .zip(&snaps)
                .map(|(&slot, s)| (slot, s.published_ns)),
            recv.max_get,
            recv.track_action,
        );
        Ok(Received {
            slots: chosen.to_vec(),
            snaps,
            batch,
            next,
            shared,
        })
    }

    /// Waits for `slot`'s next result and takes it, never another slot's:
    /// a row (the result schema's batch size) with the keys its worker
    /// published and the slot under [`SLOT_KEY`](crate::SLOT_KEY). Counts as
    /// a batch of one with `max_get` 1, tracking the action.
    ///
    /// Errors: the slot out of range; [`ReadError::SlotTimeout`] when the
    /// deadline passes first, or [`ReadError::Busy`] if the slot's writer
    /// was mid-write then. Nothing is taken then.
    pub fn receive_one(
        &mut self,
        slot: usize,
        timeout: Option<Duration>,
    ) -> Result<TensorDict, ReadError> {
        self.receive_row(slot, timeout, false)
            .map(|(result, _)| result)
    }

    /// As [`Exchange::receive_one`], with the next root published with the
    /// result by [`Exchange::publish_pair`] (empty of tensors if it was
    /// published without one).
    pub fn receive_one_pair(
        &mut self,
        slot: usize,
        timeout: Option<Duration>,
    ) -> Result<(TensorDict, TensorDict), ReadError> {
        self.receive_row(slot, timeout, true)
            .map(|(result, next)| (result, next.expect("asked for")))
    }

    fn receive_row(
        &mut self,
        slot: usize,
        timeout: Option<Duration>,
        want_next: bool,
    ) -> Result<(TensorDict, Option<TensorDict>), ReadError> {
        let start = Instant::now();
        self.check_read_slot(slot)?;
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let shared = Arc::clone(&self.shared);
        loop {
            let ticket = bell::listen(shared.bell());
            let mut busy = false;
            match self.fresh(slot) {
                Ok(Some(_)) => match shared.read_row(slot, want_next, READ_RETRIES) {
                    Ok((snap, result, next)) if snap.clock > self.taken[slot] => {
                        self.taken[slot] = snap.clock;
                        self.lock_stats().record_received(
                            now_ns(),
                            [(slot, snap.published_ns)].into_iter(),
                            Some(1),
                            true,
                        );
                        return Ok((result, next));
                    }
                    // Written again while it was copied.
                    _ => busy = true,
                },
                Ok(None) => {}
                Err(()) => busy = true,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(if busy {
                    ReadError::Busy { slot }
                } else {
                    ReadError::SlotTimeout {
                        slot,
                        timeout: timeout.unwrap_or(Duration::ZERO),
                    }
                });
            }
            bell::wait_bell(shared.bell(), ticket, deadline, SPIN);
        }
    }

    /// A ticket for [`Exchange::wait_bell`]: take it *before* checking the
    /// slots (with [`Exchange::read_into`]), so that a publication after the
    /// check ends the wait.
    pub fn listen(&self) -> u32 {
        bell::listen(self.shared.bell())
    }

    /// Waits until the bell rang after `ticket` was taken (a publication, or
    /// [`Exchange::ring`]): spins briefly, then sleeps until `deadline`.
    /// Returns whether it rang (false: the deadline passed first).
    pub fn wait_bell(&self, ticket: u32, deadline: Option<Instant>) -> bool {
        self.wait_bell_spinning(ticket, deadline, SPIN)
    }

    /// As [`Exchange::wait_bell`], spinning for up to `spin` (yielding the
    /// core as it goes) before it sleeps: a reader that expects results
    /// soon spares itself and the writer a wake-up system call.
    pub fn wait_bell_spinning(
        &self,
        ticket: u32,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> bool {
        !matches!(
            bell::wait_bell(self.shared.bell(), ticket, deadline, spin),
            crate::futex::WaitOutcome::TimedOut
        )
    }
}
