//! `Exchange`: the slots of one shared region, each with an input area that
//! the parent writes and a command word the worker sleeps on, and a result
//! (and next) area that the worker publishes under the slot's seqlock clock
//! and the parent receives from, with `min_get`, `max_get` and a deadline.
//!
//! # Protocol
//!
//! Request path (parent to worker): [`Exchange::write_input`] copies an
//! action into the slot's input area and records which keys it wrote;
//! [`Exchange::post`] stamps the send time and posts a command
//! (`futex::command`, whose Release pairs with the worker's Acquire take);
//! the worker, asleep in [`Exchange::wait_command`], wakes, takes the
//! command and copies the input out with [`Exchange::read_input`].
//!
//! Result path (worker to parent): [`Exchange::publish`] (or
//! [`Exchange::publish_pair`]) makes the slot's clock odd, copies the keys
//! present, the publish time and the tensors in, makes the clock even again
//! and rings the consumer's bell (`futex::bell`). The parent's
//! [`Exchange::receive`] takes a bell ticket, scans the clocks, and takes
//! every slot whose clock is even and newer than the last it took, copying
//! each with a validated seqlock read: a result is never returned torn. When
//! too few are ready it spins briefly, then sleeps on the bell until the
//! deadline.
//!
//! One writer per slot: a slot's result is published by one thread at a
//! time, and its input written and its commands posted by one thread at a
//! time. Every process maps the region and holds its own `Exchange`
//! ([`Exchange::open`] on a duplicated descriptor); the reader's bookkeeping
//! (which results it took, the statistics) is its own.
//!
//! # Files
//!
//! - `exchange.rs`: the `Exchange` itself: creating and opening a region,
//!   its header, the slot checks and the statistics;
//! - `access.rs`: the shared region and its layout, and the slot words and
//!   field copies every path goes through (`Shared`);
//! - `fields.rs`: tensordicts as the fields of a schema: which keys a
//!   tensordict has, and batches assembled from field columns;
//! - `request.rs`: the request path: inputs and the command word;
//! - `publish.rs`: the publish path: the clock, the result and next areas,
//!   the bell;
//! - `lend.rs`: a slot's areas lent to its worker as in-place views, and
//!   their publish (no copy on the worker's side);
//! - `receive.rs`: receives with `min_get`, `max_get` and a deadline, and
//!   the bell a receiver sleeps on;
//! - `received.rs`: what a receive took, and lazy views of it;
//! - `rows.rs`: reads and writes of a pool's own buffers: one slot into an
//!   env's tensors (`read_into`), results into rows of batch columns
//!   (`columns`, `read_rows`), inputs from rows (`input_rows`,
//!   `write_input_row`).

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::error::{ExchangeError, ReadError, WriteError};
use crate::futex::command;
use crate::layout::{region_header, Area, Layout, MAX_SLOTS, SLOTS_OFFSET, SLOT_HEADER_SIZE};
use crate::region::Region;
use crate::schema::Schema;
use crate::seqlock;
use crate::stats::{now_ns, ExchangeStats, StatsState};

use self::access::Shared;

mod access;
mod fields;
#[allow(unsafe_code)]
mod lend;
mod publish;
mod receive;
mod received;
mod request;
mod rows;

pub use self::lend::LentWrite;
pub use self::receive::Receive;
pub use self::received::{Received, SlotView};
pub use self::rows::{Columns, InputRows, SlotRead};

/// The key under which a received batch (and a row read from a slot) carries
/// the slot indices of its results, as a pool's batches carry `env_index`: a
/// non-tensor stack, one integer per row. No schema may have it as a
/// top-level key.
pub const SLOT_KEY: &str = "slot";

/// The smallest command [`Exchange::post`] accepts; the values below are the
/// command word's own states.
pub const FIRST_COMMAND: u32 = command::FIRST_COMMAND;

/// How long a reader or a worker spins, checking its word, before it sleeps
/// on the futex: long enough to catch a result that is microseconds away,
/// short enough not to steal a core that an env needs.
const SPIN: Duration = Duration::from_micros(20);

/// Extra attempts of a seqlock read that a write overlapped, before the
/// slot counts as busy for this pass.
const READ_RETRIES: u32 = 4;

/// The slots of a shared region between one parent and its workers: inputs
/// and commands one way, results the other, with the reader's bookkeeping
/// (which result it took last from each slot) and statistics.
///
/// ```
/// use exchange::{Exchange, Field, Receive, Schema};
/// use tensordict::{DType, Tensor, TensorDict};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let action = Schema::new(&[], vec![Field::new("action", DType::I64, &[1])?])?;
/// let step = Schema::new(&[], vec![Field::new("observation", DType::F32, &[4])?])?;
/// let mut parent = Exchange::create("example", action.clone(), step.clone(), Schema::empty(&[]), 2)?;
/// // A worker maps the same region from a duplicated descriptor.
/// let worker = Exchange::open(parent.try_clone_fd()?, action.clone(), step, Schema::empty(&[]))?;
///
/// let mut td = TensorDict::new(&[]);
/// td.set("action", Tensor::from_vec(&[1], vec![3i64])?)?;
/// parent.write_input(1, &td)?;
/// parent.post(1, exchange::FIRST_COMMAND)?;
///
/// let command = worker.wait_command(1, None)?;
/// assert_eq!(command, Some(exchange::FIRST_COMMAND));
/// let mut input = action.zeros();
/// worker.read_input(1, &mut input)?;
/// let mut result = TensorDict::new(&[]);
/// result.set("observation", Tensor::full(&[4], 0.5f32))?;
/// worker.publish(1, &result)?;
///
/// let received = parent.receive(Receive::new())?;
/// assert_eq!(received.slots(), &[1]);
/// assert_eq!(received.batch().tensor("observation")?.shape(), &[1, 4]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Exchange {
    shared: Arc<Shared>,
    /// The clock of the last result this reader took from each slot.
    taken: Vec<u64>,
    stats: Mutex<StatsState>,
    /// The region as a block of in-place views, once a worker lends a
    /// slot's areas ([`Exchange::lend_area`]).
    lent: std::sync::OnceLock<tensordict::SharedBlock>,
}

impl Exchange {
    /// Creates a region of `slots` slots for these schemas (any may be
    /// empty), named `name` for diagnostics. The region header is written
    /// last (magic word with Release), so an opener never sees a half-made
    /// region.
    pub fn create(
        name: &str,
        input: Schema,
        result: Schema,
        next: Schema,
        slots: usize,
    ) -> Result<Exchange, ExchangeError> {
        let layout = Layout::new(&input, &result, &next, slots)?;
        for area in [Area::Result, Area::Next] {
            if let Some(field) = layout.schema(area).field(SLOT_KEY) {
                return Err(ExchangeError::ReservedKey {
                    area,
                    key: field.key().clone(),
                });
            }
        }
        let region = Region::create(name, layout.total_size())?;
        write_header(&region, &layout)?;
        Ok(Exchange::from_parts(region, layout))
    }

    /// Opens a region made by [`Exchange::create`] (in this process or
    /// another) from its descriptor, with the schemas this side expects.
    /// The header must carry the magic word and this build's layout
    /// version, and agree with the schemas: an error names the area whose
    /// schema differs, or the size that does.
    pub fn open(
        fd: OwnedFd,
        input: Schema,
        result: Schema,
        next: Schema,
    ) -> Result<Exchange, ExchangeError> {
        use region_header as h;
        let region = Region::open(fd)?;
        if region.len() < SLOTS_OFFSET {
            return Err(ExchangeError::TooSmall {
                len: region.len(),
                min: SLOTS_OFFSET,
            });
        }
        let u64_at = |offset| region.atomic_u64(offset).map(|w| w.load(Ordering::Relaxed));
        let u32_at = |offset| region.atomic_u32(offset).map(|w| w.load(Ordering::Relaxed));
        // Acquire: pairs with the Release store of the magic word in
        // `write_header`; the header words read after it are complete.
        let magic = region.atomic_u64(h::MAGIC_OFFSET)?.load(Ordering::Acquire);
        if magic != h::MAGIC {
            return Err(ExchangeError::BadMagic {
                found: magic,
                expected: h::MAGIC,
            });
        }
        let version = u32_at(h::VERSION_OFFSET)?;
        if version != h::VERSION {
            return Err(ExchangeError::Version {
                found: version,
                expected: h::VERSION,
            });
        }
        let size = |what, found: u64, expected: usize| {
            if found == expected as u64 {
                Ok(())
            } else {
                Err(ExchangeError::SizeMismatch {
                    what,
                    found,
                    expected: expected as u64,
                })
            }
        };
        size(
            "slot header size",
            u64::from(u32_at(h::SLOT_HEADER_SIZE_OFFSET)?),
            SLOT_HEADER_SIZE,
        )?;
        let slots = u64_at(h::SLOTS_OFFSET)?;
        let slots = usize::try_from(slots).map_err(|_| ExchangeError::SizeMismatch {
            what: "slot count",
            found: slots,
            expected: MAX_SLOTS as u64,
        })?;
        let layout = Layout::new(&input, &result, &next, slots)?;
        for (i, area) in Area::ALL.into_iter().enumerate() {
            if u32_at(h::AREA_FINGERPRINTS_OFFSET + 4 * i)? != layout.area_fingerprint(area) {
                return Err(ExchangeError::SchemaMismatch { area });
            }
        }
        size(
            "slot size",
            u64_at(h::SLOT_SIZE_OFFSET)?,
            layout.slot_size(),
        )?;
        size(
            "region size",
            u64_at(h::TOTAL_SIZE_OFFSET)?,
            layout.total_size(),
        )?;
        size("mapped length", region.len() as u64, layout.total_size())?;
        let fingerprint = u64_at(h::FINGERPRINT_OFFSET)?;
        if fingerprint != layout.fingerprint() {
            return Err(ExchangeError::Fingerprint {
                found: fingerprint,
                expected: layout.fingerprint(),
            });
        }
        Ok(Exchange::from_parts(region, layout))
    }

    fn from_parts(region: Region, layout: Layout) -> Exchange {
        let slots = layout.slots();
        Exchange {
            shared: Arc::new(Shared { region, layout }),
            taken: vec![seqlock::NEVER_PUBLISHED; slots],
            stats: Mutex::new(StatsState::new(slots)),
            lent: std::sync::OnceLock::new(),
        }
    }

    /// The region's descriptor, to pass to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shared.region.fd()
    }

    /// A new descriptor of the region, for [`Exchange::open`] elsewhere.
    pub fn try_clone_fd(&self) -> Result<OwnedFd, ExchangeError> {
        Ok(self.shared.region.try_clone_fd()?)
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.shared.layout.slots()
    }

    /// The layout: the schemas of the three areas and where every byte
    /// lies.
    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    fn check_write_slot(&self, slot: usize) -> Result<(), WriteError> {
        if slot < self.slots() {
            Ok(())
        } else {
            Err(WriteError::SlotOutOfRange {
                slot,
                slots: self.slots(),
            })
        }
    }

    fn check_read_slot(&self, slot: usize) -> Result<(), ReadError> {
        if slot < self.slots() {
            Ok(())
        } else {
            Err(ReadError::SlotOutOfRange {
                slot,
                slots: self.slots(),
            })
        }
    }

    fn lock_stats(&self) -> MutexGuard<'_, StatsState> {
        // The counters stay consistent at every step: a panic while they
        // were held leaves nothing half-updated that matters.
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The statistics since creation or the last reset (see
    /// [`ExchangeStats`]); with `reset`, the counters start again.
    pub fn stats(&self, reset: bool) -> ExchangeStats {
        self.lock_stats().snapshot(now_ns(), reset)
    }
}

/// Writes the region header of `layout` into a fresh (zeroed) region: every
/// word, then the magic word last with Release.
fn write_header(region: &Region, layout: &Layout) -> Result<(), ExchangeError> {
    use region_header as h;
    // Relaxed: published by the Release store of the magic word below.
    region
        .atomic_u32(h::VERSION_OFFSET)?
        .store(h::VERSION, Ordering::Relaxed);
    region
        .atomic_u32(h::SLOT_HEADER_SIZE_OFFSET)?
        .store(SLOT_HEADER_SIZE as u32, Ordering::Relaxed);
    for (offset, value) in [
        (h::SLOTS_OFFSET, layout.slots()),
        (h::SLOT_SIZE_OFFSET, layout.slot_size()),
        (h::TOTAL_SIZE_OFFSET, layout.total_size()),
    ] {
        // Relaxed: as above.
        region
            .atomic_u64(offset)?
            .store(value as u64, Ordering::Relaxed);
    }
    // Relaxed: as above.
    region
        .atomic_u64(h::FINGERPRINT_OFFSET)?
        .store(layout.fingerprint(), Ordering::Relaxed);
    for (i, area) in Area::ALL.into_iter().enumerate() {
        // Relaxed: as above.
        region
            .atomic_u32(h::AREA_FINGERPRINTS_OFFSET + 4 * i)?
            .store(layout.area_fingerprint(area), Ordering::Relaxed);
    }
    // Release: pairs with the Acquire load of the magic word in
    // `Exchange::open`.
    region
        .atomic_u64(h::MAGIC_OFFSET)?
        .store(h::MAGIC, Ordering::Release);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Field;
    use tensordict::{DType, Tensor, TensorDict};

    /// A schema of root-level fields (key, dtype, shape), for the tests of
    /// this module and its parts.
    pub(super) fn schema(fields: &[(&str, DType, &[usize])]) -> Schema {
        Schema::new(
            &[],
            fields
                .iter()
                .map(|&(key, dtype, shape)| Field::new(key, dtype, shape).unwrap())
                .collect(),
        )
        .unwrap()
    }

    fn exchange(slots: usize) -> Exchange {
        Exchange::create(
            "rlpool-slots-unit",
            schema(&[("action", DType::I64, &[1])]),
            schema(&[("observation", DType::F32, &[3])]),
            Schema::empty(&[]),
            slots,
        )
        .unwrap()
    }

    fn observation(value: f32) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        td.set("observation", Tensor::full(&[3], value)).unwrap();
        td
    }

    #[test]
    fn a_writer_dead_mid_write_leaves_its_slot_busy_never_ready() {
        let mut ex = exchange(2);
        ex.publish(0, &observation(1.0)).unwrap();
        // A writer that died between begin_write and end_write.
        let _ = seqlock::begin_write(ex.shared.clock(1));
        let err = ex.receive_one(1, Some(Duration::ZERO)).unwrap_err();
        assert_eq!(err, ReadError::Busy { slot: 1 });
        let err = ex
            .receive(Receive::new().min_get(2).timeout(Duration::ZERO))
            .unwrap_err();
        assert_eq!(
            err,
            ReadError::Timeout {
                timeout: Duration::ZERO,
                ready: 1,
                min_get: 2,
                busy: 1
            }
        );
        assert!(err.to_string().contains("1 slot mid-write"), "{err}");
        // The other slot is still there, and the next writer carries on.
        let got = ex.receive(Receive::new().timeout(Duration::ZERO)).unwrap();
        assert_eq!(got.slots(), &[0]);
        ex.publish(1, &observation(2.0)).unwrap();
        let row = ex.receive_one(1, Some(Duration::ZERO)).unwrap();
        assert_eq!(
            row.tensor("observation").unwrap().to_vec::<f32>().unwrap(),
            [2.0; 3]
        );
    }

    #[test]
    fn a_view_of_a_slot_being_written_is_stale() {
        let mut ex = exchange(1);
        ex.publish(0, &observation(1.0)).unwrap();
        let got = ex.receive(Receive::new()).unwrap();
        let view = got.view(0);
        assert!(!view.is_stale());
        let start = seqlock::begin_write(ex.shared.clock(0));
        assert!(matches!(
            view.read(),
            Err(ReadError::Stale {
                slot: 0,
                seen: 2,
                now: 3
            })
        ));
        seqlock::end_write(ex.shared.clock(0), start);
        assert!(matches!(
            view.read(),
            Err(ReadError::Stale {
                seen: 2,
                now: 4,
                ..
            })
        ));
    }

    #[test]
    fn the_header_is_written_with_every_word() {
        let ex = exchange(3);
        let region = &ex.shared.region;
        let layout = &ex.shared.layout;
        let word = |offset| region.atomic_u64(offset).unwrap().load(Ordering::Relaxed);
        assert_eq!(word(region_header::MAGIC_OFFSET), region_header::MAGIC);
        assert_eq!(word(region_header::SLOTS_OFFSET), 3);
        assert_eq!(
            word(region_header::TOTAL_SIZE_OFFSET),
            layout.total_size() as u64
        );
        assert_eq!(
            word(region_header::FINGERPRINT_OFFSET),
            layout.fingerprint()
        );
    }
}
