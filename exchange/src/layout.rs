//! `Layout`: where every byte of a shared region goes (the region header,
//! and for each slot its header, input, result and next areas), computed
//! from three schemas and a number of slots. Pure arithmetic: no memory is
//! touched here.
//!
//! ```text
//! offset 0    region header (64 bytes): magic, version, sizes, fingerprint
//! offset 64   control line (64 bytes): the consumer's wake-up word
//! offset 128  slot 0: slot header (SLOT_HEADER_SIZE = 128): clock, command
//!                     word, keys-present masks, timestamps
//!                     input area   (fields of the input schema)
//!                     result area  (fields of the result schema)
//!                     next area    (fields of the next schema)
//!             slot 1: ...
//! ```
//!
//! Every slot, slot header and area starts on a cache line
//! ([`CACHE_LINE`] = 64 bytes), so that two slots never share a line and a
//! writer filling one slot does not slow a reader of another. Every field
//! starts on an 8-byte boundary ([`FIELD_ALIGN`]), which is aligned for
//! every dtype; the bytes from a field's end to the next boundary belong to
//! no field, so a copy may move whole 8-byte words. An empty schema gives an
//! empty area (size 0).
//!
//! All multi-byte words are little-endian, as the machine writes them: a
//! region is shared between processes of one machine only.

use std::fmt;
use std::ops::Range;

use crate::error::LayoutError;
use crate::schema::Schema;

/// Size of a cache line: the alignment of every slot, slot header and area.
pub const CACHE_LINE: usize = 64;

/// Alignment of every field inside an area: 8 bytes, the size of the largest
/// dtype, so every field is aligned for its dtype.
pub const FIELD_ALIGN: usize = 8;

/// Most slots a region holds. A sanity bound that catches a slot count
/// computed wrongly before it maps gigabytes: one slot serves one env, and
/// 65 536 envs are more than one machine steps.
pub const MAX_SLOTS: usize = 1 << 16;

/// Most fields an area holds: the slot header keeps one 64-bit
/// keys-present mask per area, one bit per field in schema order.
pub const MAX_AREA_FIELDS: usize = 64;

/// Offset of slot 0: the region header (magic, version, sizes; one cache
/// line) and the control line (the consumer's wake-up word; one cache line)
/// come first.
pub const SLOTS_OFFSET: usize = region_header::SIZE + control::SIZE;

/// Size of a slot header: two cache lines, the first written by the slot's
/// producer (readiness clock, keys-present masks of the result and next
/// areas, publish time), the second by its consumer (command word,
/// keys-present mask of the input area, send time).
pub const SLOT_HEADER_SIZE: usize = 2 * CACHE_LINE;

/// The region header: the first cache line of the region. Written once at
/// creation, magic last; checked at open; read-only afterwards.
// Read and written by the slot layer (`slots`), which loom builds leave out.
#[allow(dead_code)]
pub(crate) mod region_header {
    /// Size of the region header, at offset 0.
    pub(crate) const SIZE: usize = super::CACHE_LINE;

    /// The magic word (`u64`, at [`MAGIC_OFFSET`]): the bytes `"RLPOOLSX"`.
    /// Written last at creation (release), so that an opener that reads it
    /// (acquire) sees a complete header and zeroed slots.
    pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"RLPOOLSX");

    /// The version of this layout (`u32`, at [`VERSION_OFFSET`]). Any change
    /// to the offsets of this module changes it; an opener refuses a region
    /// of another version.
    pub(crate) const VERSION: u32 = 1;

    /// Offset of the magic word ([`MAGIC`], `u64`).
    pub(crate) const MAGIC_OFFSET: usize = 0;

    /// Offset of the layout version ([`VERSION`], `u32`).
    pub(crate) const VERSION_OFFSET: usize = 8;

    /// Offset of the slot header size
    /// ([`SLOT_HEADER_SIZE`](super::SLOT_HEADER_SIZE), `u32`), so that a
    /// region describes itself.
    pub(crate) const SLOT_HEADER_SIZE_OFFSET: usize = 12;

    /// Offset of the number of slots ([`Layout::slots`](super::Layout::slots),
    /// `u64`).
    pub(crate) const SLOTS_OFFSET: usize = 16;

    /// Offset of the size of one slot
    /// ([`Layout::slot_size`](super::Layout::slot_size), `u64`).
    pub(crate) const SLOT_SIZE_OFFSET: usize = 24;

    /// Offset of the size of the region
    /// ([`Layout::total_size`](super::Layout::total_size), `u64`).
    pub(crate) const TOTAL_SIZE_OFFSET: usize = 32;

    /// Offset of the layout's fingerprint
    /// ([`Layout::fingerprint`](super::Layout::fingerprint), `u64`): an
    /// opener whose schemas differ from the creator's in any key, dtype or
    /// shape refuses the region even when the sizes agree.
    pub(crate) const FINGERPRINT_OFFSET: usize = 40;

    /// Offset of the fingerprints of the three schemas, one `u32` each
    /// (input, result, next: at +0, +4, +8;
    /// [`Layout::area_fingerprint`](super::Layout::area_fingerprint)), so
    /// that an opener whose schemas differ learns which one.
    pub(crate) const AREA_FINGERPRINTS_OFFSET: usize = 48;

    // Bytes 60..64 are reserved and zero.
}

/// The control line: the second cache line of the region, written by every
/// producer, read by the consumer.
// Read and written by the slot layer (`slots`), which loom builds leave out.
#[allow(dead_code)]
pub(crate) mod control {
    /// Offset of the control line, just after the region header.
    pub(crate) const OFFSET: usize = super::region_header::SIZE;

    /// Size of the control line.
    pub(crate) const SIZE: usize = super::CACHE_LINE;

    /// Offset of the consumer's wake-up word (`u32`: a futex word is 32
    /// bits), advanced by a producer after it publishes a slot; the consumer
    /// sleeps on it when no slot is ready.
    pub(crate) const WAKE_OFFSET: usize = OFFSET;

    /// Offset of the number of consumers asleep on the wake-up word (`u32`),
    /// so that a producer makes the wake-up system call only when someone
    /// sleeps.
    pub(crate) const SLEEPERS_OFFSET: usize = OFFSET + 4;

    // Bytes 8..64 of the line are reserved and zero.
}

/// The words of a slot header, as offsets from the start of the slot. The
/// first cache line is written by the slot's producer (the worker that
/// publishes results), the second by the consumer (the parent that sends
/// commands), so neither writes a line that the other writes.
// Read and written by the slot layer (`slots`), which loom builds leave out.
#[allow(dead_code)]
pub(crate) mod slot_header {
    /// Offset of the readiness clock (`u64`): the seqlock over the result
    /// and next areas. Odd while the worker writes them, even when they are
    /// published; it only grows.
    pub(crate) const CLOCK_OFFSET: usize = 0;

    /// Offset of the result keys-present mask (`u64`): bit `i` is set when
    /// field `i` of the result schema was written by the last publish. Read
    /// under the clock.
    pub(crate) const RESULT_KEYS_OFFSET: usize = 8;

    /// Offset of the next keys-present mask (`u64`), as
    /// [`RESULT_KEYS_OFFSET`] for the next area.
    pub(crate) const NEXT_KEYS_OFFSET: usize = 16;

    /// Offset of the time of the last publish (`u64`, nanoseconds of
    /// `CLOCK_MONOTONIC`, which every process of the machine shares). Read
    /// under the clock.
    pub(crate) const PUBLISHED_NS_OFFSET: usize = 24;

    // Bytes 32..64 of the producer's line are reserved and zero.

    /// Offset of the consumer's line: the words below are written by the
    /// consumer only.
    pub(crate) const CONSUMER_LINE_OFFSET: usize = super::CACHE_LINE;

    /// Offset of the command word (`u32`: a futex word is 32 bits) that the
    /// worker sleeps on: the consumer writes the input area, then advances
    /// this word and wakes the worker.
    pub(crate) const COMMAND_OFFSET: usize = CONSUMER_LINE_OFFSET;

    /// Offset of the input keys-present mask (`u64`): bit `i` is set when
    /// field `i` of the input schema was written with the last command.
    pub(crate) const INPUT_KEYS_OFFSET: usize = CONSUMER_LINE_OFFSET + 8;

    /// Offset of the time the last command was sent (`u64`, nanoseconds of
    /// `CLOCK_MONOTONIC`).
    pub(crate) const SENT_NS_OFFSET: usize = CONSUMER_LINE_OFFSET + 16;

    // Bytes 24..64 of the consumer's line are reserved and zero.
}

// What the picture above promises, checked when the crate compiles.
const _: () = {
    assert!(region_header::FINGERPRINT_OFFSET + 8 <= region_header::AREA_FINGERPRINTS_OFFSET);
    assert!(region_header::AREA_FINGERPRINTS_OFFSET + 3 * 4 <= region_header::SIZE);
    assert!(control::OFFSET == region_header::SIZE);
    assert!(control::SLEEPERS_OFFSET + 4 <= control::OFFSET + control::SIZE);
    assert!(SLOTS_OFFSET % CACHE_LINE == 0 && SLOT_HEADER_SIZE % CACHE_LINE == 0);
    // The producer's words sit on the first line, the consumer's on the
    // second.
    assert!(slot_header::PUBLISHED_NS_OFFSET + 8 <= slot_header::CONSUMER_LINE_OFFSET);
    assert!(slot_header::SENT_NS_OFFSET + 8 <= SLOT_HEADER_SIZE);
    assert!(FIELD_ALIGN.is_power_of_two() && CACHE_LINE % FIELD_ALIGN == 0);
};

/// One of the three data areas of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Area {
    /// What the consumer sends: an action (the input of a step or reset).
    Input,
    /// What the worker publishes: a step's or reset's result.
    Result,
    /// What the worker publishes beside the result: the next root of
    /// `step_and_maybe_reset`.
    Next,
}

impl Area {
    /// The three areas, in the order they sit in a slot.
    pub const ALL: [Area; 3] = [Area::Input, Area::Result, Area::Next];

    /// `"input"`, `"result"` or `"next"`.
    pub const fn name(self) -> &'static str {
        match self {
            Area::Input => "input",
            Area::Result => "result",
            Area::Next => "next",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The byte layout of a shared region: where each slot, slot header, area
/// and field lies: the region header and the control line (bytes
/// `0..SLOTS_OFFSET`), then `slots` slots of [`Layout::slot_size`] bytes,
/// each a [`SLOT_HEADER_SIZE`]-byte header followed by the input, result and
/// next areas.
///
/// ```
/// use exchange::{Area, Field, Layout, Schema};
/// use tensordict::DType;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let input = Schema::new(&[], vec![Field::new("action", DType::I64, &[1])?])?;
/// let result = Schema::new(&[], vec![Field::new("observation", DType::F32, &[4])?])?;
/// let layout = Layout::new(&input, &result, &Schema::empty(&[]), 8)?;
/// assert_eq!(layout.slot_size(), 128 + 64 + 64);
/// assert_eq!(layout.area_offset(1, Area::Result), 128 + 256 + 128 + 64);
/// assert_eq!(layout.total_size(), 128 + 8 * 256);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The schemas of the areas, indexed by [`Area::index`].
    schemas: [Schema; 3],
    /// Each area's offset from the start of its slot.
    area_offsets: [usize; 3],
    /// Each area's size, padded to a cache line.
    area_sizes: [usize; 3],
    /// Each field's offset from the start of its area.
    field_offsets: [Vec<usize>; 3],
    slots: usize,
    slot_size: usize,
    total_size: usize,
}

/// `x` rounded up to a multiple of `align` (a power of two), if it fits.
fn align_up(x: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// The offsets of a schema's fields from the start of their area, and the
/// area's size padded to a cache line.
fn lay_out_area(schema: &Schema) -> Option<(Vec<usize>, usize)> {
    let mut offsets = Vec::with_capacity(schema.len());
    let mut end = 0usize;
    for field in schema.fields() {
        let start = align_up(end, FIELD_ALIGN)?;
        offsets.push(start);
        end = start.checked_add(field.nbytes())?;
    }
    Some((offsets, align_up(end, CACHE_LINE)?))
}

/// Largest region: a mapping, like any Rust allocation, spans at most
/// `isize::MAX` bytes.
const MAX_REGION_SIZE: usize = isize::MAX as usize;

impl Layout {
    /// The layout of `slots` slots, each with an area for `input`, one for
    /// `result` and one for `next` (any may be empty).
    ///
    /// An error if there is no slot or more than [`MAX_SLOTS`], if a schema
    /// has more than [`MAX_AREA_FIELDS`] fields, or if the region would be
    /// larger than `isize::MAX` bytes.
    pub fn new(
        input: &Schema,
        result: &Schema,
        next: &Schema,
        slots: usize,
    ) -> Result<Layout, LayoutError> {
        if slots == 0 {
            return Err(LayoutError::NoSlots);
        }
        if slots > MAX_SLOTS {
            return Err(LayoutError::TooManySlots {
                slots,
                max: MAX_SLOTS,
            });
        }
        let schemas = [input.clone(), result.clone(), next.clone()];
        for area in Area::ALL {
            let fields = schemas[area.index()].len();
            if fields > MAX_AREA_FIELDS {
                return Err(LayoutError::TooManyFields {
                    area,
                    fields,
                    max: MAX_AREA_FIELDS,
                });
            }
        }
        let slot_too_large = || LayoutError::SlotTooLarge {
            input: input.nbytes(),
            result: result.nbytes(),
            next: next.nbytes(),
            max: MAX_REGION_SIZE,
        };
        let mut area_offsets = [0; 3];
        let mut area_sizes = [0; 3];
        let mut field_offsets: [Vec<usize>; 3] = Default::default();
        let mut slot_size = SLOT_HEADER_SIZE;
        for area in Area::ALL {
            let i = area.index();
            let (offsets, size) = lay_out_area(&schemas[i]).ok_or_else(slot_too_large)?;
            area_offsets[i] = slot_size;
            area_sizes[i] = size;
            field_offsets[i] = offsets;
            slot_size = slot_size.checked_add(size).ok_or_else(slot_too_large)?;
        }
        if slot_size > MAX_REGION_SIZE - SLOTS_OFFSET {
            return Err(slot_too_large());
        }
        let total_size = slots
            .checked_mul(slot_size)
            .and_then(|s| s.checked_add(SLOTS_OFFSET))
            .filter(|&total| total <= MAX_REGION_SIZE)
            .ok_or(LayoutError::RegionTooLarge {
                slots,
                slot_size,
                max: MAX_REGION_SIZE,
            })?;
        Ok(Layout {
            schemas,
            area_offsets,
            area_sizes,
            field_offsets,
            slots,
            slot_size,
            total_size,
        })
    }

    /// The schema of an area.
    pub fn schema(&self, area: Area) -> &Schema {
        &self.schemas[area.index()]
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Size of one slot (header, areas and padding), a multiple of
    /// [`CACHE_LINE`].
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Size of the whole region in bytes.
    pub fn total_size(&self) -> usize {
        self.total_size
    }

    fn check_slot(&self, slot: usize) {
        assert!(
            slot < self.slots,
            "slot {slot} is out of range for a layout of {} slots",
            self.slots
        );
    }

    /// Offset of a slot, which is where its header starts.
    ///
    /// # Panics
    /// If `slot` is not below [`Layout::slots`].
    pub fn slot_offset(&self, slot: usize) -> usize {
        self.check_slot(slot);
        // Cannot overflow: bounded by `total_size`, checked in `new`.
        SLOTS_OFFSET + slot * self.slot_size
    }

    /// The bytes of a slot's header (its clock, command word, keys-present
    /// masks and timestamps).
    ///
    /// # Panics
    /// If `slot` is not below [`Layout::slots`].
    pub fn slot_header_range(&self, slot: usize) -> Range<usize> {
        let start = self.slot_offset(slot);
        start..start + SLOT_HEADER_SIZE
    }

    /// Offset of an area of a slot. An empty area has this offset and size
    /// 0.
    ///
    /// # Panics
    /// If `slot` is not below [`Layout::slots`].
    pub fn area_offset(&self, slot: usize, area: Area) -> usize {
        self.slot_offset(slot) + self.area_offsets[area.index()]
    }

    /// Size of an area (the same in every slot), padded to a multiple of
    /// [`CACHE_LINE`].
    pub fn area_size(&self, area: Area) -> usize {
        self.area_sizes[area.index()]
    }

    /// The offsets of an area's fields from the start of the area, in the
    /// order of its schema's fields (the same in every slot).
    pub fn field_offsets(&self, area: Area) -> &[usize] {
        &self.field_offsets[area.index()]
    }

    /// Offset of field `field` (an index into the area's
    /// [`Schema::fields`]) of an area of a slot.
    ///
    /// # Panics
    /// If `slot` is not below [`Layout::slots`] or `field` is not below the
    /// number of the area's fields.
    pub fn field_offset(&self, slot: usize, area: Area, field: usize) -> usize {
        let offsets = &self.field_offsets[area.index()];
        assert!(
            field < offsets.len(),
            "field {field} is out of range for the {area} schema's {} fields",
            offsets.len()
        );
        self.area_offset(slot, area) + offsets[field]
    }

    /// The bytes of field `field` of an area of a slot.
    ///
    /// # Panics
    /// As [`Layout::field_offset`].
    pub fn field_range(&self, slot: usize, area: Area, field: usize) -> Range<usize> {
        let start = self.field_offset(slot, area, field);
        start..start + self.schemas[area.index()].fields()[field].nbytes()
    }

    /// A 64-bit FNV-1a hash of the layout version, the three encoded schemas
    /// and the number of slots: stored in the region header at creation and
    /// compared at open.
    pub fn fingerprint(&self) -> u64 {
        let mut hash = FNV_OFFSET_BASIS;
        let mut eat = |bytes: &[u8]| fnv1a(&mut hash, bytes);
        eat(&region_header::VERSION.to_le_bytes());
        for schema in &self.schemas {
            let bytes = schema.encode();
            // The length first, so that no two lists of schemas hash the
            // same bytes.
            eat(&(bytes.len() as u64).to_le_bytes());
            eat(&bytes);
        }
        eat(&(self.slots as u64).to_le_bytes());
        hash
    }

    /// A 32-bit hash of one area's encoded schema, stored in the region
    /// header beside [`Layout::fingerprint`] so that an opener can name the
    /// area whose schema differs.
    pub fn area_fingerprint(&self, area: Area) -> u32 {
        let mut hash = FNV_OFFSET_BASIS;
        fnv1a(&mut hash, &self.schemas[area.index()].encode());
        (hash ^ (hash >> 32)) as u32
    }
}

/// The FNV-1a offset basis (64 bits).
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// Feeds `bytes` to the 64-bit FNV-1a hash `hash`.
fn fnv1a(hash: &mut u64, bytes: &[u8]) {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(PRIME);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Field;
    use tensordict::DType;

    #[test]
    fn header_words_fit_their_lines_and_do_not_overlap() {
        use {control as c, region_header as r, slot_header as h};
        let region = [
            (r::MAGIC_OFFSET, 8),
            (r::VERSION_OFFSET, 4),
            (r::SLOT_HEADER_SIZE_OFFSET, 4),
            (r::SLOTS_OFFSET, 8),
            (r::SLOT_SIZE_OFFSET, 8),
            (r::TOTAL_SIZE_OFFSET, 8),
            (r::FINGERPRINT_OFFSET, 8),
            (r::AREA_FINGERPRINTS_OFFSET, 4),
            (r::AREA_FINGERPRINTS_OFFSET + 4, 4),
            (r::AREA_FINGERPRINTS_OFFSET + 8, 4),
            (c::WAKE_OFFSET, 4),
            (c::SLEEPERS_OFFSET, 4),
        ];
        let slot = [
            (h::CLOCK_OFFSET, 8),
            (h::RESULT_KEYS_OFFSET, 8),
            (h::NEXT_KEYS_OFFSET, 8),
            (h::PUBLISHED_NS_OFFSET, 8),
            (h::COMMAND_OFFSET, 4),
            (h::INPUT_KEYS_OFFSET, 8),
            (h::SENT_NS_OFFSET, 8),
        ];
        for (words, end) in [(&region[..], SLOTS_OFFSET), (&slot[..], SLOT_HEADER_SIZE)] {
            for (i, &(off, size)) in words.iter().enumerate() {
                assert_eq!(off % size, 0, "word at {off} is aligned");
                assert!(off + size <= end);
                // A word never straddles a cache line.
                assert_eq!(off / CACHE_LINE, (off + size - 1) / CACHE_LINE);
                for &(other, other_size) in &words[i + 1..] {
                    assert!(off + size <= other || other + other_size <= off);
                }
            }
        }
        assert_eq!(&r::MAGIC.to_le_bytes(), b"RLPOOLSX");
    }

    #[test]
    fn fingerprints_differ_when_anything_differs() {
        let a = Schema::new(&[], vec![Field::new("a", DType::F32, &[4]).unwrap()]).unwrap();
        let b = Schema::new(&[], vec![Field::new("a", DType::I32, &[4]).unwrap()]).unwrap();
        let e = Schema::empty(&[]);
        let base = Layout::new(&a, &e, &e, 2).unwrap();
        assert_eq!(base.fingerprint(), base.clone().fingerprint());
        for other in [
            Layout::new(&b, &e, &e, 2).unwrap(),
            Layout::new(&a, &e, &e, 3).unwrap(),
            Layout::new(&e, &a, &e, 2).unwrap(),
        ] {
            assert_ne!(base.fingerprint(), other.fingerprint());
        }
        // Area by area: only the area whose schema changed.
        let swapped = Layout::new(&b, &e, &e, 3).unwrap();
        assert_ne!(
            base.area_fingerprint(Area::Input),
            swapped.area_fingerprint(Area::Input)
        );
        assert_eq!(
            base.area_fingerprint(Area::Result),
            swapped.area_fingerprint(Area::Result)
        );
        assert_eq!(
            base.area_fingerprint(Area::Next),
            swapped.area_fingerprint(Area::Next)
        );
    }

    #[test]
    fn align_up_rounds_to_powers_of_two() {
        assert_eq!(align_up(0, 64), Some(0));
        assert_eq!(align_up(1, 64), Some(64));
        assert_eq!(align_up(64, 64), Some(64));
        assert_eq!(align_up(9, 8), Some(16));
        assert_eq!(align_up(usize::MAX, 8), None);
    }
}
