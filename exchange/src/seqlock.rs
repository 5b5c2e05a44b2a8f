//! The readiness clock of a slot: a single-writer seqlock over caller-provided memory.
//!
//! A slot's bytes are published under a `u64` clock that lives next to them:
//! odd while the writer copies data in, even once the data are published
//! ([`NEVER_PUBLISHED`] in a zeroed slot). The functions take the clock as a
//! `&AtomicU64` and the bytes as a raw pointer, so the same protocol runs on
//! heap memory in tests and on a `MAP_SHARED` mapping between processes.
//!
//! - Writer (one per clock): [`begin_write`], any number of [`write_bytes`],
//!   [`end_write`].
//! - Reader (any number): [`read_begin`], any number of [`read_bytes`],
//!   [`read_validate`]; or [`read_consistent`], which does all three and
//!   retries.
//!
//! A writer that dies mid-write leaves the clock odd; readers report the slot
//! busy until the next [`begin_write`], which carries on from the odd value.
//!
//! # Memory ordering
//!
//! The writer and the readers synchronize through the clock alone (Boehm,
//! "Can seqlocks get along with programming language memory models?", 2012):
//!
//! - [`begin_write`] stores the odd clock and then issues a **Release
//!   fence**. It pairs with the **Acquire fence** in [`read_validate`]: a
//!   reader whose copy read any byte stored after `begin_write` re-loads the
//!   odd clock or a later one, and fails validation.
//! - [`end_write`] stores the even clock with **Release**. It pairs with the
//!   **Acquire load** in [`read_begin`]: a reader that loads that value sees
//!   every byte of the write that published it.
//! - Between the two clock reads, bytes are copied with **relaxed atomic**
//!   loads and stores only, never plain ones: a copy that races a write is not
//!   a data race, only a mix of old and new bytes, which validation rejects.
//!
//! So a read that validates returns bytes written by the one write that
//! published the clock value it returns, never a torn mix. The clock orders
//! nothing else: the command word and the doorbell that wake the two sides
//! carry their own orderings, in [`futex`](crate::futex).
//!
//! # Access sizes
//!
//! [`write_bytes`] and [`read_bytes`] copy whole 8-byte-aligned words as
//! `u64`s and the bytes before and after them one by one. Two copies of the
//! same bytes use the same access sizes when they cover the same range, or
//! ranges that start and end on 8-byte boundaries; keep to that so that atomic
//! accesses of different sizes never overlap. [`write_words`] and
//! [`read_words`] copy a range that starts on an 8-byte boundary as whole
//! words, the last one padded: for ranges whose bytes up to the next
//! boundary belong to no one else (a layout's fields), each copied with
//! these two only, so their accesses are all `u64`s.
// loom builds leave the slot layer out, and the tests that compile this file
// in use part of it.
#![cfg_attr(any(loom, test), allow(dead_code))]

use crate::primitive::raw::{AtomicU64 as RawU64, AtomicU8 as RawU8};
use crate::primitive::sync::atomic::{fence, AtomicU64, Ordering};
use crate::primitive::sync::hint::spin_loop;

/// The clock of a slot that was never published: even, with nothing to read.
pub(crate) const NEVER_PUBLISHED: u64 = 0;

/// The clock bit that is set (odd clock) while the writer copies data in.
pub(crate) const WRITING: u64 = 1;

/// The clock advances by this much per publication (odd, then even again).
const STEP: u64 = 2;

/// Why [`read_consistent`] gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The clock was odd on the last attempt: the writer was copying data in.
    Busy,
    /// The clock moved during the last attempt's copy: the bytes were torn.
    Torn,
}

/// Starts a write: the clock goes odd. Returns the even value it had, which
/// [`end_write`] needs.
///
/// Only one writer may use a clock: this is a plain store, not a lock.
pub(crate) fn begin_write(clock: &AtomicU64) -> u64 {
    // Relaxed: the clock's only writer reads its own last store.
    let current = clock.load(Ordering::Relaxed);
    // Rounds an abandoned (odd) write up to the next even value.
    let start = current.wrapping_add(WRITING) & !WRITING;
    // Relaxed: kept before the data stores by the Release fence below.
    clock.store(start | WRITING, Ordering::Relaxed);
    // Release fence: pairs with the Acquire fence in `read_validate`.
    fence(Ordering::Release);
    start
}

/// Ends the write that [`begin_write`] returned `start` for: the clock goes
/// even (`start + 2`) and the bytes are published. Returns the new clock.
pub(crate) fn end_write(clock: &AtomicU64, start: u64) -> u64 {
    debug_assert_eq!(start & WRITING, 0, "`start` comes from begin_write");
    let published = start.wrapping_add(STEP);
    // Release: pairs with the Acquire load in `read_begin`.
    clock.store(published, Ordering::Release);
    published
}

/// Starts a read: the clock's value, or `None` while a write is under way.
pub(crate) fn read_begin(clock: &AtomicU64) -> Option<u64> {
    // Acquire: pairs with the Release store in `end_write`.
    let seen = clock.load(Ordering::Acquire);
    (seen & WRITING == 0).then_some(seen)
}

/// Ends a read that [`read_begin`] returned `seen` for: `true` if no write
/// began since, so the bytes copied in between are consistent.
pub(crate) fn read_validate(clock: &AtomicU64, seen: u64) -> bool {
    // Acquire fence: pairs with the Release fence in `begin_write`.
    fence(Ordering::Acquire);
    // Relaxed: kept after the copies by the Acquire fence above.
    clock.load(Ordering::Relaxed) == seen
}

/// Runs `copy` between [`read_begin`] and [`read_validate`] until it is
/// consistent, at most `retries + 1` times. Returns the clock value the copy
/// is consistent with, or why the last attempt failed.
///
/// `copy` must read the protected data with relaxed atomic loads only (see
/// [`read_bytes`]); what it copied is meaningful only when this returns `Ok`.
pub(crate) fn read_consistent_with(
    clock: &AtomicU64,
    retries: u32,
    mut copy: impl FnMut(),
) -> Result<u64, ReadError> {
    let mut failure = ReadError::Busy;
    for attempt in 0..=retries {
        if attempt > 0 {
            spin_loop();
        }
        let Some(seen) = read_begin(clock) else {
            failure = ReadError::Busy;
            continue;
        };
        copy();
        if read_validate(clock, seen) {
            return Ok(seen);
        }
        failure = ReadError::Torn;
    }
    Err(failure)
}

/// Copies `dst.len()` bytes published under `clock` at `src` into `dst`,
/// retrying up to `retries` times; see [`read_consistent_with`].
///
/// # Safety
///
/// As for [`read_bytes`]: `src` is valid for reads and writes of `dst.len()`
/// bytes for the duration of the call, and only ever accessed atomically.
// The slot layer copies many fields per read (`read_consistent_with`); the
// tests use this one-buffer form.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) unsafe fn read_consistent(
    clock: &AtomicU64,
    src: *const u8,
    dst: &mut [u8],
    retries: u32,
) -> Result<u64, ReadError> {
    read_consistent_with(clock, retries, || {
        // SAFETY: the caller's contract is `read_bytes`'s, with the same length.
        unsafe { read_bytes(src, dst) }
    })
}

/// How many bytes come before the first 8-byte-aligned word at `addr`, and
/// how many whole words follow, in `len` bytes.
fn split(addr: *const u8, len: usize) -> (usize, usize) {
    // `align_offset` may answer usize::MAX; then every byte goes one by one.
    let head = addr.align_offset(align_of::<RawU64>()).min(len);
    (head, (len - head) / size_of::<u64>())
}

/// Copies `src` to `dst` with relaxed atomic stores: a racing reader sees
/// old or new bytes, never a data race. Call it between [`begin_write`] and
/// [`end_write`].
///
/// # Safety
///
/// - `dst` is valid for reads and writes of `src.len()` bytes for the
///   duration of the call (it may be dangling if `src` is empty);
/// - those bytes are only ever accessed atomically while others may access
///   them, with the access sizes described in the module docs;
/// - they do not overlap `src`.
pub(crate) unsafe fn write_bytes(dst: *mut u8, src: &[u8]) {
    let (head, words) = split(dst, src.len());
    let (head_bytes, rest) = src.split_at(head);
    let (word_bytes, tail_bytes) = rest.split_at(words * size_of::<u64>());
    let tail_start = head + word_bytes.len();
    for (i, &byte) in head_bytes.iter().enumerate() {
        // SAFETY: `i < src.len()`, so the byte is in the caller's area, which
        // is accessed atomically only; a byte is always aligned.
        let cell = unsafe { RawU8::from_ptr(dst.add(i)) };
        // Relaxed: ordered by the clock (fence in begin_write, end_write).
        cell.store(byte, Ordering::Relaxed);
    }
    for (w, chunk) in word_bytes.chunks_exact(size_of::<u64>()).enumerate() {
        let word = u64::from_ne_bytes(chunk.try_into().expect("an 8-byte chunk"));
        // SAFETY: the word lies in the caller's area, which is accessed
        // atomically only; `split` put `dst + head` on an 8-byte boundary.
        let cell = unsafe { RawU64::from_ptr(dst.add(head + w * 8).cast()) };
        // Relaxed: ordered by the clock (fence in begin_write, end_write).
        cell.store(word, Ordering::Relaxed);
    }
    for (i, &byte) in tail_bytes.iter().enumerate() {
        // SAFETY: `tail_start + i < src.len()`: in the caller's area, as above.
        let cell = unsafe { RawU8::from_ptr(dst.add(tail_start + i)) };
        // Relaxed: ordered by the clock (fence in begin_write, end_write).
        cell.store(byte, Ordering::Relaxed);
    }
}

/// Copies `src` to `dst` as [`write_bytes`] does, but as whole words: the
/// bytes of the last word past `src` are written as zeros. One atomic store
/// per 8 bytes, where [`write_bytes`] stores a short range's bytes one by
/// one.
///
/// # Safety
///
/// As for [`write_bytes`], and: `dst` is 8-byte aligned, and the bytes from
/// its end to the next 8-byte boundary are the caller's too, copied only by
/// these word copies.
pub(crate) unsafe fn write_words(dst: *mut u8, src: &[u8]) {
    debug_assert!(dst as usize % size_of::<u64>() == 0, "8-byte aligned");
    let mut chunks = src.chunks_exact(size_of::<u64>());
    let mut w = 0;
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes(chunk.try_into().expect("an 8-byte chunk"));
        // SAFETY: word `w` lies in the caller's area (aligned: `dst` is),
        // which is accessed atomically only.
        let cell = unsafe { RawU64::from_ptr(dst.add(w * 8).cast()) };
        // Relaxed: ordered by the clock (fence in begin_write, end_write).
        cell.store(word, Ordering::Relaxed);
        w += 1;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut bytes = [0u8; 8];
        copy_short(&mut bytes[..tail.len()], tail);
        // SAFETY: the last word is the caller's up to its 8-byte boundary
        // (the caller's promise), aligned, accessed atomically only.
        let cell = unsafe { RawU64::from_ptr(dst.add(w * 8).cast()) };
        // Relaxed: as above.
        cell.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

/// `dst.len()` (under 8) bytes of `src` into `dst`, each length a copy of a
/// constant size: a copy whose length is known only at run time is a call
/// to `memcpy` (a byte loop too, which the compiler turns into one), dearer
/// than the few bytes it moves.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    match dst.len() {
        1 => dst.copy_from_slice(&src[..1]),
        2 => dst.copy_from_slice(&src[..2]),
        3 => dst.copy_from_slice(&src[..3]),
        4 => dst.copy_from_slice(&src[..4]),
        5 => dst.copy_from_slice(&src[..5]),
        6 => dst.copy_from_slice(&src[..6]),
        7 => dst.copy_from_slice(&src[..7]),
        n => dst.copy_from_slice(&src[..n]),
    }
}

/// Copies `dst.len()` bytes at `src` into `dst` as [`read_bytes`] does, but
/// as whole words: the last word is loaded whole and its first bytes kept.
///
/// # Safety
///
/// As for [`read_bytes`], and: `src` is 8-byte aligned, and the bytes from
/// its end to the next 8-byte boundary are the caller's too, copied only by
/// these word copies.
pub(crate) unsafe fn read_words(src: *const u8, dst: &mut [u8]) {
    let src = src.cast_mut();
    debug_assert!(src as usize % size_of::<u64>() == 0, "8-byte aligned");
    let mut chunks = dst.chunks_exact_mut(size_of::<u64>());
    let mut w = 0;
    for chunk in &mut chunks {
        // SAFETY: word `w` lies in the caller's area (aligned: `src` is),
        // which is accessed atomically only.
        let cell = unsafe { RawU64::from_ptr(src.add(w * 8).cast()) };
        // Relaxed: ordered by the clock (read_begin, fence in read_validate).
        chunk.copy_from_slice(&cell.load(Ordering::Relaxed).to_ne_bytes());
        w += 1;
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        // SAFETY: the last word is the caller's up to its 8-byte boundary
        // (the caller's promise), aligned, accessed atomically only.
        let cell = unsafe { RawU64::from_ptr(src.add(w * 8).cast()) };
        // Relaxed: as above.
        let word = cell.load(Ordering::Relaxed).to_ne_bytes();
        copy_short(tail, &word);
    }
}

/// Copies `dst.len()` bytes at `src` into `dst` with relaxed atomic loads: a
/// racing writer makes the copy stale or torn, never a data race. Call it
/// between [`read_begin`] and [`read_validate`], and trust `dst` only if the
/// latter returns `true`.
///
/// # Safety
///
/// - `src` is valid for reads and writes of `dst.len()` bytes for the
///   duration of the call (it may be dangling if `dst` is empty): atomics
///   need writable memory even to load;
/// - those bytes are only ever accessed atomically while others may access
///   them, with the access sizes described in the module docs.
pub(crate) unsafe fn read_bytes(src: *const u8, dst: &mut [u8]) {
    let src = src.cast_mut();
    let (head, words) = split(src, dst.len());
    let (head_bytes, rest) = dst.split_at_mut(head);
    let (word_bytes, tail_bytes) = rest.split_at_mut(words * size_of::<u64>());
    let tail_start = head + word_bytes.len();
    for (i, byte) in head_bytes.iter_mut().enumerate() {
        // SAFETY: `i < dst.len()`, so the byte is in the caller's area, which
        // is accessed atomically only; a byte is always aligned.
        let cell = unsafe { RawU8::from_ptr(src.add(i)) };
        // Relaxed: ordered by the clock (read_begin, fence in read_validate).
        *byte = cell.load(Ordering::Relaxed);
    }
    for (w, chunk) in word_bytes.chunks_exact_mut(size_of::<u64>()).enumerate() {
        // SAFETY: the word lies in the caller's area, which is accessed
        // atomically only; `split` put `src + head` on an 8-byte boundary.
        let cell = unsafe { RawU64::from_ptr(src.add(head + w * 8).cast()) };
        // Relaxed: ordered by the clock (read_begin, fence in read_validate).
        chunk.copy_from_slice(&cell.load(Ordering::Relaxed).to_ne_bytes());
    }
    for (i, byte) in tail_bytes.iter_mut().enumerate() {
        // SAFETY: `tail_start + i < dst.len()`: in the caller's area, as above.
        let cell = unsafe { RawU8::from_ptr(src.add(tail_start + i)) };
        // Relaxed: ordered by the clock (read_begin, fence in read_validate).
        *byte = cell.load(Ordering::Relaxed);
    }
}
