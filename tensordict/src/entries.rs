//! `Entries`: the entries of one tensordict level, a vector sorted by key.
//!
//! A step's tensordict has a handful of keys, and the hot path looks them up
//! several times per step. A sorted vector searched linearly (lengths first,
//! so most misses cost no byte comparison) beats a tree map at that size;
//! larger levels are binary searched.

use std::ops::Index;
use std::sync::Arc;

use crate::Entry;

/// Below this many entries, lookups scan linearly.
const LINEAR_SCAN_MAX: usize = 16;

/// A key at one level. Shared, so that cloning and indexing a tensordict
/// copy no key bytes.
pub(crate) type Name = Arc<str>;

/// Whether two keys are equal: lengths first, then the same address, then
/// the bytes, inlined (keys are short; a `memcmp` call costs more than the
/// comparison).
#[inline]
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || same_bytes(a.as_bytes(), b.as_bytes()))
}

/// Whether two byte strings of one length are equal, eight bytes at a time
/// (the last word overlapping the one before), or four, or one by one for
/// the shortest.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert_eq!(n, b.len());
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let half = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    if n >= 8 {
        let mut at = 0;
        while at + 8 <= n {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        at == n || word(a, n - 8) == word(b, n - 8)
    } else if n >= 4 {
        half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4)
    } else {
        a.iter().zip(b).all(|(x, y)| x == y)
    }
}

/// Entries sorted by key, each key once, and their stamp.
///
/// The stamp is what makes [`crate::LentRows::is_view`] one comparison: it
/// is nonzero only on a lent row's view as made (`LentRows::lend` sets it,
/// unique to the row), and every method here that gives write access to an
/// entry, or adds, replaces or removes one, sets it to zero first, but
/// [`Entries::at_mut_in_place`], which only a tensor's in-place writes go
/// through. A level below is reached for writing only through its
/// parent's entry, so a change anywhere in a view zeroes the view's own
/// stamp. A clone starts at zero (its tensors are copies of the rows).
#[derive(Default)]
pub(crate) struct Entries {
    list: Vec<(Name, Entry)>,
    stamp: u64,
}

impl Clone for Entries {
    fn clone(&self) -> Entries {
        self.clone_with_room(0)
    }
}

impl PartialEq for Entries {
    /// The entries alone: the stamp is bookkeeping.
    fn eq(&self, other: &Entries) -> bool {
        self.list == other.list
    }
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Entries").field(&self.list).finish()
    }
}

impl Entries {
    /// A clone with room for `additional` more entries.
    pub(crate) fn clone_with_room(&self, additional: usize) -> Entries {
        let mut list = Vec::with_capacity(self.list.len() + additional);
        list.extend(self.list.iter().cloned());
        Entries { list, stamp: 0 }
    }

    /// Where `key` is (`Ok`), or where it would be inserted (`Err`).
    pub(crate) fn position(&self, key: &str) -> Result<usize, usize> {
        if self.list.len() <= LINEAR_SCAN_MAX {
            for (i, (k, _)) in self.list.iter().enumerate() {
                if same_name(k, key) {
                    return Ok(i);
                }
            }
            Err(self.list.partition_point(|(k, _)| &**k < key))
        } else {
            self.list.binary_search_by(|(k, _)| (**k).cmp(key))
        }
    }

    /// Where `key` is, looking at position `hint` first: where it usually
    /// is when two sorted levels are walked side by side (one has the
    /// other's keys, or a few more).
    pub(crate) fn position_near(&self, key: &str, hint: usize) -> Option<usize> {
        if hint < self.list.len() && same_name(&self.list[hint].0, key) {
            Some(hint)
        } else {
            self.position(key).ok()
        }
    }

    /// Where `key` is, looking at position `at` first: a hit when the
    /// name there is `key` itself (one allocation, so one pointer; the
    /// caller holds `key`, so no other name can have its address). Else a
    /// search by its bytes; when found, `key` becomes the found name and
    /// `at` its position, so that the next look here is a hit.
    #[inline]
    pub(crate) fn find(&self, key: &mut Name, at: &mut usize) -> Option<usize> {
        if let Some((name, _)) = self.list.get(*at) {
            if Arc::ptr_eq(name, key) {
                return Some(*at);
            }
        }
        let i = self.position(key).ok()?;
        *key = Arc::clone(&self.list[i].0);
        *at = i;
        Some(i)
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Entry> {
        self.position(key).ok().map(|i| &self.list[i].1)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.stamp = 0;
        match self.position(key) {
            Ok(i) => Some(&mut self.list[i].1),
            Err(_) => None,
        }
    }

    /// The entry at position `i` (from [`Entries::position`]).
    pub(crate) fn at(&self, i: usize) -> &Entry {
        &self.list[i].1
    }

    /// The keys and entries, in order (for loops that zip several).
    pub(crate) fn as_slice(&self) -> &[(Name, Entry)] {
        &self.list
    }

    /// The key and entry at position `i`.
    pub(crate) fn at_named(&self, i: usize) -> (&str, &Entry) {
        let (name, entry) = &self.list[i];
        (name, entry)
    }

    /// The key and entry at position `i`, the entry writable.
    pub(crate) fn at_named_mut(&mut self, i: usize) -> (&str, &mut Entry) {
        self.stamp = 0;
        let (name, entry) = &mut self.list[i];
        (name, entry)
    }

    /// The entry at position `i`, writable, the stamp kept: for writing a
    /// tensor's elements in place ([`crate::TensorMut`], which cannot
    /// replace the tensor), or for walking down to one; for anything else,
    /// [`Entries::at_named_mut`].
    #[inline]
    pub(crate) fn at_mut_in_place(&mut self, i: usize) -> &mut Entry {
        &mut self.list[i].1
    }

    /// The stamp (see [`Entries`]): nonzero on a lent row's view that no
    /// entry of was replaced, added or removed since it was made.
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp
    }

    /// Stamps a lent row's view as made (`LentRows::lend`).
    pub(crate) fn set_stamp(&mut self, stamp: u64) {
        self.stamp = stamp;
    }

    /// Inserts or replaces; returns the replaced entry.
    pub(crate) fn insert(&mut self, key: Name, entry: Entry) -> Option<Entry> {
        self.stamp = 0;
        // A key after the last (as a pool's batch gets its `"env_index"` and
        // `"next"` after `"action"`) is new: appended, no search.
        if self.list.last().is_none_or(|(last, _)| **last < *key) {
            self.list.push((key, entry));
            return None;
        }
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.list[i].1, entry)),
            Err(i) => {
                self.list.insert(i, (key, entry));
                None
            }
        }
    }

    /// The entry at `key`, inserted from `make` if absent.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &str,
        make: impl FnOnce() -> Entry,
    ) -> &mut Entry {
        self.stamp = 0;
        let i = match self.position(key) {
            Ok(i) => i,
            Err(i) => {
                self.list.insert(i, (Name::from(key), make()));
                i
            }
        };
        &mut self.list[i].1
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<Entry> {
        self.stamp = 0;
        self.position(key).ok().map(|i| self.list.remove(i).1)
    }

    /// Appends an entry whose key sorts after every key present (for
    /// building a level in order, as indexing does).
    pub(crate) fn push_sorted(&mut self, key: Name, entry: Entry) {
        self.stamp = 0;
        debug_assert!(self.list.last().is_none_or(|(k, _)| *k < key));
        self.list.push((key, entry));
    }

    /// Room for `additional` more entries.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.stamp = 0;
        self.list.reserve(additional);
    }

    /// An empty level with room for `n` entries.
    pub(crate) fn with_capacity(n: usize) -> Entries {
        Entries {
            list: Vec::with_capacity(n),
            stamp: 0,
        }
    }

    /// Entries in key order, mutably.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Name, &mut Entry)> {
        self.stamp = 0;
        self.list.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Name, &Entry)> {
        self.list.iter().map(|(k, v)| (k, v))
    }

    /// Keys in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Name> {
        self.list.iter().map(|(k, _)| k)
    }
}

impl Index<&str> for Entries {
    type Output = Entry;
    fn index(&self, key: &str) -> &Entry {
        self.get(key).expect("key present")
    }
}

impl Index<&Name> for Entries {
    type Output = Entry;
    fn index(&self, key: &Name) -> &Entry {
        &self[&**key]
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = (&'a Name, &'a Entry);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Name, Entry)>,
        fn(&'a (Name, Entry)) -> (&'a Name, &'a Entry),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NonTensor, Tensor};

    #[test]
    fn sorted_insert_lookup_remove_small_and_large() {
        for n in [3usize, 40] {
            let mut entries = Entries::default();
            for i in (0..n).rev() {
                assert!(entries
                    .insert(
                        format!("k{i:03}").into(),
                        Entry::NonTensor(NonTensor::Int(i as i64))
                    )
                    .is_none());
            }
            let keys: Vec<&Name> = entries.keys().collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(
                entries.get("k001"),
                Some(&Entry::NonTensor(NonTensor::Int(1)))
            );
            assert!(entries.get("zz").is_none());
            assert!(entries
                .insert("k001".into(), Entry::Tensor(Tensor::scalar(1u8)))
                .is_some());
            assert_eq!(entries.len(), n);
            assert!(entries.remove("k002").is_some());
            assert!(entries.remove("k002").is_none());
            entries.get_or_insert_with("a", || Entry::NonTensor(NonTensor::Int(-1)));
            assert_eq!(entries.keys().next().map(|k| &**k), Some("a"));
        }
    }

    /// The word-wise comparison agrees with `==` for every length up to
    /// three words and a difference at every position.
    #[test]
    fn same_name_agrees_with_string_equality() {
        for n in 0..=24 {
            let a: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let copy = a.clone();
            assert!(same_name(&a, &copy), "{a:?}");
            for at in 0..n {
                let mut b = a.clone().into_bytes();
                b[at] = b'Z';
                let b = String::from_utf8(b).unwrap();
                assert!(!same_name(&a, &b), "{a:?} vs {b:?}");
            }
            assert!(!same_name(&a, &format!("{a}x")));
        }
    }
}
