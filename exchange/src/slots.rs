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

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use tensordict::{Entry, NestedKey, NonTensor, Shape, Tensor, TensorDict};

use crate::error::{ExchangeError, ReadError, SchemaError, WriteError};
use crate::futex::{bell, command};
use crate::layout::{
    control, region_header, slot_header, Area, Layout, MAX_SLOTS, SLOTS_OFFSET, SLOT_HEADER_SIZE,
};
use crate::region::Region;
use crate::schema::{count_leaves, Field, Schema};
use crate::seqlock;
use crate::stats::{now_ns, ExchangeStats, StatsState};

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

/// The region and its layout: what every `Exchange`, received batch and view
/// of one mapping shares.
#[derive(Debug)]
struct Shared {
    region: Region,
    layout: Layout,
}

/// What one consistent read of a slot saw, besides the tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Snapshot {
    /// The clock the read is consistent with (even).
    clock: u64,
    /// Keys-present mask of the result area (bits past its fields cleared).
    result_mask: u64,
    /// Keys-present mask of the next area (bits past its fields cleared).
    next_mask: u64,
    /// When the worker published it (`now_ns`).
    published_ns: u64,
}

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

/// One part of a buffer per field of a schema (on the stack up to 16
/// fields: a receive cuts a slot's areas this way for every result).
type Parts<'a> = SmallVec<[&'a mut [u8]; 16]>;

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

/// `bytes` cut into one part per field of `schema`, in order.
fn split_fields<'a>(schema: &Schema, mut bytes: &'a mut [u8]) -> Parts<'a> {
    let mut parts = Parts::with_capacity(schema.len());
    for field in schema.fields() {
        let (part, rest) = std::mem::take(&mut bytes).split_at_mut(field.nbytes());
        parts.push(part);
        bytes = rest;
    }
    parts
}

/// A mask with one bit for each of `n` fields (`n <= 64`).
fn all_fields(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

impl Shared {
    /// The `u64` header word at `offset` in `slot`'s header.
    fn word64(&self, slot: usize, offset: usize) -> &AtomicU64 {
        self.region
            .atomic_u64(self.layout.slot_offset(slot) + offset)
            .expect("slot header words lie in the region, 8-aligned")
    }

    /// The readiness clock of `slot`.
    fn clock(&self, slot: usize) -> &AtomicU64 {
        self.word64(slot, slot_header::CLOCK_OFFSET)
    }

    /// The command word of `slot`.
    fn command(&self, slot: usize) -> &AtomicU32 {
        self.region
            .atomic_u32(self.layout.slot_offset(slot) + slot_header::COMMAND_OFFSET)
            .expect("the command word lies in the region, 4-aligned")
    }

    /// The consumer's bell, rung after every publication.
    fn bell(&self) -> &AtomicU32 {
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
    fn load(&self, offset: usize, dst: &mut [u8]) {
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
    fn store(&self, offset: usize, src: &[u8]) {
        if let Err(err) = self.region.store(offset, src) {
            panic!("a field of the layout: {err}");
        }
    }

    /// Copies the fields of `slot`'s `area` whose bits are set in `mask`
    /// into row `row` of `columns` (one per field of the area, each `rows`
    /// times the field's size).
    fn copy_fields(
        &self,
        slot: usize,
        area: Area,
        mask: u64,
        row: usize,
        columns: &mut [&mut [u8]],
    ) {
        let fields = self.layout.schema(area).fields();
        for (i, (field, column)) in fields.iter().zip(columns.iter_mut()).enumerate() {
            if mask & (1 << i) != 0 {
                let n = field.nbytes();
                self.load(
                    self.layout.field_offset(slot, area, i),
                    &mut column[row * n..(row + 1) * n],
                );
            }
        }
    }

    /// One consistent read of `slot`'s published result into row `row` of
    /// `result` (and of `next`, unless it is empty), trying up to
    /// `retries + 1` times.
    fn read_slot(
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
    /// worker published and the slot under [`SLOT_KEY`].
    fn read_row(
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

/// `shape` with `rows` in front, when given.
fn stacked(rows: Option<usize>, shape: &[usize]) -> Shape {
    let mut out = Shape::with_capacity(shape.len() + 1);
    out.extend(rows);
    out.extend_from_slice(shape);
    out
}

/// A zeroed tensor for each field of `schema`, `rows` of them stacked when
/// given.
fn columns(schema: &Schema, rows: Option<usize>) -> Vec<Tensor> {
    schema
        .fields()
        .iter()
        .map(|field| Tensor::zeros(field.dtype(), &stacked(rows, field.shape())))
        .collect()
}

/// True if `key` lies inside the sub-dict `dict`.
fn is_under(key: &NestedKey, dict: &NestedKey) -> bool {
    key.len() > dict.len() && key.parts().starts_with(dict.parts())
}

/// A tensordict of `schema` (stacked `rows` times, when given) holding the
/// `columns` of the fields set in `mask`, and the sub-dicts on their paths
/// (plus the schema's empty sub-dicts).
fn assemble(schema: &Schema, rows: Option<usize>, columns: Vec<Tensor>, mask: u64) -> TensorDict {
    let fields = schema.fields();
    let mut td = TensorDict::new(&stacked(rows, schema.batch_size()));
    // Parents come first, so each sub-dict's parent exists when it is set.
    for (key, batch) in schema.sub_dicts() {
        let mut under = fields
            .iter()
            .enumerate()
            .filter(|(_, f)| is_under(f.key(), key));
        let empty_in_schema = under.clone().next().is_none();
        if empty_in_schema || under.any(|(i, _)| mask & (1 << i) != 0) {
            td.set(key, TensorDict::new(&stacked(rows, batch)))
                .expect("a schema's sub-dicts start with their parent's batch size");
        }
    }
    for ((i, field), column) in fields.iter().enumerate().zip(columns) {
        if mask & (1 << i) != 0 {
            td.set(field.key(), column)
                .expect("a schema's fields start with their sub-dict's batch size");
        }
    }
    td
}

/// `value` repeated to fill `dims` (a nested stack), as TorchRL expands
/// `env_index` to a batch's dims.
fn expand(value: NonTensor, dims: &[usize]) -> NonTensor {
    match dims.split_first() {
        None => value,
        Some((&n, rest)) => NonTensor::Stack(vec![expand(value, rest); n]),
    }
}

/// Sets the slot indices under [`SLOT_KEY`]: a stack over the rows when
/// `rows` is given, one value otherwise, expanded to the schema's batch
/// size `batch`.
fn set_slots(td: &mut TensorDict, slots: &[usize], rows: Option<usize>, batch: &[usize]) {
    let value = |slot: usize| expand(NonTensor::Int(slot as i64), batch);
    let entry = match rows {
        Some(_) => NonTensor::Stack(slots.iter().map(|&s| value(s)).collect()),
        None => value(slots[0]),
    };
    td.set(SLOT_KEY, entry)
        .expect("the slot indices have the batch's shape");
}

/// Writes `field` of `schema` into `td` (its tensor at the field's key,
/// looked up once) with `fill`, if `td` holds it with the field's dtype and
/// shape; otherwise the schema error that says what is wrong with `td`.
fn fill_field(
    schema: &Schema,
    field: &Field,
    td: &mut TensorDict,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), SchemaError> {
    match td.tensor_mut(field.key()) {
        Ok(mut t) if t.dtype() == field.dtype() && t.shape() == field.shape() => {
            fill(t.bytes_mut());
            Ok(())
        }
        _ => Err(schema.check(td).err().unwrap_or(SchemaError::UnknownKeys {
            keys: vec![field.key().clone()],
        })),
    }
}

/// The tensors of `td` at the fields of `schema` that it has, in field
/// order.
type Present<'a> = SmallVec<[&'a Tensor; 16]>;

/// The keys-present mask of `td` for `schema`, and the tensors present (so
/// that a writer looks each key up once): `td` has the schema's batch size,
/// no key that the schema lacks, and the schema's dtype and shape at each
/// key it has; it may leave keys of the schema out.
///
/// When several things are wrong, the error is the first of: the batch
/// size; the keys the schema lacks (all of them); the first key, in order,
/// whose dtype or shape differs.
fn present_fields<'a>(
    schema: &Schema,
    td: &'a TensorDict,
) -> Result<(u64, Present<'a>), SchemaError> {
    if td.batch_size() != schema.batch_size() {
        return Err(SchemaError::BatchSize {
            batch_size: td.batch_size().to_vec(),
            expected: schema.batch_size().to_vec(),
        });
    }
    let mut mask = 0u64;
    let mut present = Present::new();
    let mut found = 0;
    let mut mismatch = None;
    for (i, field) in schema.fields().iter().enumerate() {
        let problem = match td.get(field.key()) {
            None | Some(Entry::Dict(_)) => continue,
            Some(Entry::Tensor(t)) if t.dtype() != field.dtype() => SchemaError::DType {
                key: field.key().clone(),
                dtype: t.dtype(),
                expected: field.dtype(),
            },
            Some(Entry::Tensor(t)) if t.shape() != field.shape() => SchemaError::Shape {
                key: field.key().clone(),
                shape: t.shape().to_vec(),
                expected: field.shape().to_vec(),
            },
            Some(Entry::Tensor(t)) => {
                found += 1;
                mask |= 1 << i;
                present.push(t);
                continue;
            }
            Some(Entry::NonTensor(_)) => SchemaError::NonTensorLeaf {
                key: field.key().clone(),
                kind: "non-tensor value",
                env: None,
            },
        };
        found += 1;
        mismatch.get_or_insert(problem);
    }
    // Every leaf found above is one of `td`'s leaves; any other is a key
    // the schema lacks.
    if count_leaves(td) > found {
        let keys = td
            .keys(true, true)
            .into_iter()
            .filter(|key| schema.position(key).is_none())
            .collect();
        return Err(SchemaError::UnknownKeys { keys });
    }
    mismatch.map_or(Ok((mask, present)), Err)
}

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

/// The results one [`Exchange::receive`] took: their slots (sorted), a dense
/// batch of their results (and of their next roots, when the exchange has a
/// next area), and lazy views that re-read a slot while it still holds the
/// result taken.
///
/// The batch has batch size `[k, ..]` (`k` results, then the result
/// schema's batch size) and the slot indices under [`SLOT_KEY`]. It holds
/// every key that at least one of the results published; when results
/// published different keys (a reset's beside a step's), [`Received::row`]
/// gives each row with exactly its own.
#[derive(Debug)]
pub struct Received {
    slots: Vec<usize>,
    snaps: Vec<Snapshot>,
    batch: TensorDict,
    next: Option<TensorDict>,
    shared: Arc<Shared>,
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
    /// [`SLOT_KEY`].
    pub fn batch(&self) -> &TensorDict {
        &self.batch
    }

    /// The next roots published with [`Exchange::publish_pair`], stacked as
    /// the batch; `None` when the exchange has no next area.
    pub fn next(&self) -> Option<&TensorDict> {
        self.next.as_ref()
    }

    /// The batch and the next roots.
    pub fn into_parts(self) -> (TensorDict, Option<TensorDict>) {
        (self.batch, self.next)
    }

    /// Row `j` of the batch with exactly the keys its worker published (and
    /// its slot under [`SLOT_KEY`]). Copies nothing: its tensors are views
    /// of the batch's.
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
    /// under [`SLOT_KEY`].
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

    /// Writes the tensors present (from `present_fields`: one for each
    /// field of `mask`, in order) into `slot`'s `area`.
    fn write_fields(&self, slot: usize, area: Area, mask: u64, present: &[&Tensor]) {
        let shared = &*self.shared;
        let fields = shared.layout.schema(area).len();
        let written = (0..fields).filter(|&i| mask & (1 << i) != 0);
        for (i, tensor) in written.zip(present) {
            shared.store(shared.layout.field_offset(slot, area, i), tensor.as_bytes());
        }
    }

    /// The command not yet taken in `slot`'s word, if any (a peek: it
    /// stays to be taken).
    ///
    /// # Panics
    /// If `slot` is not below [`Exchange::slots`].
    pub fn pending_command(&self, slot: usize) -> Option<u32> {
        // Relaxed: only this side posts; it sees its own post or the
        // worker's take, and orders nothing by it.
        let word = self.shared.command(slot).load(Ordering::Relaxed);
        (word >= FIRST_COMMAND).then_some(word)
    }

    /// Writes an action into `slot`'s input area (parent side), before
    /// [`Exchange::post`]. `td` has the input schema's batch size and, at
    /// each key it has, the schema's dtype and shape; keys of the schema it
    /// lacks are left as they were (the slot records which were written).
    ///
    /// An error names the slot and the key: a key outside the schema (such
    /// data needs the queue exchange), a dtype, a shape; or a command still
    /// pending, whose worker may read the input at any moment. Write only
    /// once the previous command's result was received: the worker reads
    /// its input between taking the command and publishing.
    pub fn write_input(&self, slot: usize, td: &TensorDict) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        let schema = self.shared.layout.schema(Area::Input);
        let (mask, present) = present_fields(schema, td).map_err(|source| WriteError::Schema {
            slot,
            area: Area::Input,
            source,
        })?;
        if let Some(pending) = self.pending_command(slot) {
            return Err(WriteError::CommandPending { slot, pending });
        }
        // Relaxed: published with the input by the Release exchange in
        // `command::post`.
        self.shared
            .word64(slot, slot_header::INPUT_KEYS_OFFSET)
            .store(mask, Ordering::Relaxed);
        self.write_fields(slot, Area::Input, mask, &present);
        Ok(())
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
            shared.store(
                shared.layout.field_offset(slot, Area::Input, i),
                &column[row * n..(row + 1) * n],
            );
        }
        Ok(())
    }

    /// Posts `command` (at least [`FIRST_COMMAND`]) to `slot`'s worker and
    /// wakes it if it sleeps; stamps the send time in the slot header and
    /// ends the slot's lease in the statistics. An error if the previous
    /// command was not taken yet.
    pub fn post(&self, slot: usize, command: u32) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        if command < FIRST_COMMAND {
            return Err(WriteError::ReservedCommand {
                command,
                first: FIRST_COMMAND,
            });
        }
        if let Some(pending) = self.pending_command(slot) {
            return Err(WriteError::CommandPending { slot, pending });
        }
        let now = now_ns();
        // Relaxed: published by the Release exchange in `command::post`.
        self.shared
            .word64(slot, slot_header::SENT_NS_OFFSET)
            .store(now, Ordering::Relaxed);
        command::post(self.shared.command(slot), command)
            .map_err(|pending| WriteError::CommandPending { slot, pending })?;
        self.lock_stats().record_action(slot, now);
        Ok(())
    }

    /// Takes `slot`'s next command (worker side): spins briefly, then sleeps
    /// until one is posted; `Ok(None)` once `deadline` passes first.
    pub fn wait_command(
        &self,
        slot: usize,
        deadline: Option<Instant>,
    ) -> Result<Option<u32>, ReadError> {
        self.check_read_slot(slot)?;
        Ok(command::wait_command(
            self.shared.command(slot),
            deadline,
            SPIN,
        ))
    }

    /// Takes `slot`'s pending command without waiting (worker side): for a
    /// worker whose threads share its slots and sleep on a [`crate::Bells`]
    /// doorbell instead of each slot's word. Several threads may race for
    /// one command: exactly one gets it.
    pub fn try_take_command(&self, slot: usize) -> Result<Option<u32>, ReadError> {
        self.check_read_slot(slot)?;
        Ok(command::take(self.shared.command(slot)))
    }

    /// Copies `slot`'s input into `out` (worker side, after taking the
    /// command): the keys written with it; the others keep their values.
    /// `out` has every key of the input schema with its dtype and shape:
    /// build it once with [`Schema::zeros`]. A written key that `out` lacks,
    /// or holds with another dtype or shape, is a [`ReadError::Schema`]
    /// error (the keys before it were copied).
    pub fn read_input(&self, slot: usize, out: &mut TensorDict) -> Result<(), ReadError> {
        self.check_read_slot(slot)?;
        let shared = &*self.shared;
        let schema = shared.layout.schema(Area::Input);
        // Relaxed: ordered after the parent's store by the Acquire swap
        // that took the command (`command::take`).
        let mask = shared
            .word64(slot, slot_header::INPUT_KEYS_OFFSET)
            .load(Ordering::Relaxed);
        // Each written field looked up once: checked, then loaded.
        for (i, field) in schema.fields().iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            fill_field(schema, field, out, |bytes| {
                shared.load(shared.layout.field_offset(slot, Area::Input, i), bytes);
            })
            .map_err(|source| ReadError::Schema {
                slot,
                area: Area::Input,
                source,
            })?;
        }
        Ok(())
    }

    /// Publishes `result` in `slot` (worker side): clock odd, keys present,
    /// publish time and tensors in, clock even, the consumer's bell rung.
    /// `result` has the result schema's batch size and, at each key it has,
    /// the schema's dtype and shape; it may leave keys out (a reset's result
    /// beside a step's). The slot's next area is marked empty.
    pub fn publish(&self, slot: usize, result: &TensorDict) -> Result<(), WriteError> {
        self.publish_areas(slot, result, None, true)
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
        self.publish_areas(slot, result, next, false)
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
        self.publish_areas(slot, result, Some(next), true)
    }

    fn publish_areas(
        &self,
        slot: usize,
        result: &TensorDict,
        next: Option<&TensorDict>,
        ring: bool,
    ) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        let shared = &*self.shared;
        let check =
            |area, td| {
                present_fields(shared.layout.schema(area), td)
                    .map_err(|source| WriteError::Schema { slot, area, source })
            };
        let (result_mask, result_present) = check(Area::Result, result)?;
        let (next_mask, next_present) = match next {
            Some(next) => check(Area::Next, next)?,
            None => (0, Present::new()),
        };
        let published = now_ns();
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
        self.write_fields(slot, Area::Result, result_mask, &result_present);
        self.write_fields(slot, Area::Next, next_mask, &next_present);
        seqlock::end_write(clock, start);
        if ring {
            bell::ring(shared.bell());
        }
        Ok(())
    }

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
    /// published and the slot under [`SLOT_KEY`]. Counts as a batch of one
    /// with `max_get` 1, tracking the action.
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

    /// The statistics since creation or the last reset (see
    /// [`ExchangeStats`]); with `reset`, the counters start again.
    pub fn stats(&self, reset: bool) -> ExchangeStats {
        self.lock_stats().snapshot(now_ns(), reset)
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

    /// Rings the consumer's bell without publishing: wakes the readers (for
    /// news that did not come through a slot, such as a worker's death).
    pub fn ring(&self) {
        bell::ring(self.shared.bell());
    }

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
    /// [`Receive::track_action`]).
    pub fn record_received(
        &self,
        taken: &[(usize, u64)],
        max_get: Option<usize>,
        track_action: bool,
    ) {
        self.lock_stats()
            .record_received(now_ns(), taken.iter().copied(), max_get, track_action);
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
    use tensordict::DType;

    fn schema(fields: &[(&str, DType, &[usize])]) -> Schema {
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

    #[test]
    fn masks_record_the_keys_present() {
        let s = schema(&[("a", DType::U8, &[1]), ("b", DType::F32, &[2])]);
        let mut td = TensorDict::new(&[]);
        assert_eq!(present_fields(&s, &td).map(|(m, _)| m), Ok(0));
        td.set("b", Tensor::zeros(DType::F32, &[2])).unwrap();
        assert_eq!(present_fields(&s, &td).map(|(m, _)| m), Ok(0b10));
        td.set("a", Tensor::zeros(DType::U8, &[1])).unwrap();
        assert_eq!(present_fields(&s, &td).map(|(m, _)| m), Ok(0b11));
        assert_eq!(all_fields(2), 0b11);
        assert_eq!(all_fields(64), u64::MAX);
    }

    #[test]
    fn slot_indices_expand_to_the_batch_size() {
        assert_eq!(
            expand(NonTensor::Int(3), &[2]),
            NonTensor::Stack(vec![NonTensor::Int(3), NonTensor::Int(3)])
        );
        let mut td = TensorDict::new(&[2, 2]);
        set_slots(&mut td, &[4, 7], Some(2), &[2]);
        assert_eq!(td.non_tensor(SLOT_KEY).unwrap().shape().as_slice(), &[2, 2]);
    }
}
