//! `TensorDict`: a map from nested keys to tensors, non-tensor values and
//! sub-dicts that share one batch size.

use std::fmt::{self, Write as _};
use std::ops::Deref;

use crate::entries::{Entries, Name};
use crate::tensor::shape_of;
use crate::{KeyLike, NestedKey, NonTensor, Shape, Tensor, TensorDictError};

/// One entry of a [`TensorDict`].
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A tensor whose leading dims are the batch size.
    Tensor(Tensor),
    /// A non-tensor value (a stack of one value per batch row when the batch
    /// size is not empty).
    NonTensor(NonTensor),
    /// A nested tensordict whose batch size starts with the parent's.
    Dict(TensorDict),
}

impl Entry {
    /// The entry's shape: a tensor's shape, a non-tensor's shape, or a
    /// sub-dict's batch size.
    pub fn shape(&self) -> Shape {
        match self {
            Entry::Tensor(t) => shape_of(t.shape()),
            Entry::NonTensor(v) => v.shape(),
            Entry::Dict(d) => shape_of(d.batch_size()),
        }
    }

    /// Whether [`Entry::shape`] starts with `prefix`, without computing
    /// all of it (a stack of non-tensors looks at its elements only as deep
    /// as `prefix` goes: a batch's `env_index` is checked in one step).
    pub fn shape_starts_with(&self, prefix: &[usize]) -> bool {
        match self {
            Entry::Tensor(t) => t.shape().starts_with(prefix),
            Entry::NonTensor(v) => v.shape_starts_with(prefix),
            Entry::Dict(d) => d.batch_size().starts_with(prefix),
        }
    }

    /// `"tensor"`, `"non-tensor"` or `"tensordict"`, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::Tensor(_) => "tensor",
            Entry::NonTensor(_) => "non-tensor",
            Entry::Dict(_) => "tensordict",
        }
    }

    /// The tensor, if this entry is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Entry::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The non-tensor value, if this entry is one.
    pub fn as_non_tensor(&self) -> Option<&NonTensor> {
        match self {
            Entry::NonTensor(v) => Some(v),
            _ => None,
        }
    }

    /// The sub-dict, if this entry is one.
    pub fn as_dict(&self) -> Option<&TensorDict> {
        match self {
            Entry::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// Row `index` along the first batch dimension.
    pub(crate) fn index(&self, index: usize) -> Result<Entry, TensorDictError> {
        Ok(match self {
            Entry::Tensor(t) => Entry::Tensor(t.index(index)?),
            Entry::Dict(d) => Entry::Dict(d.index(index)?),
            Entry::NonTensor(v) => {
                let len = v.unbind().map_or(0, <[NonTensor]>::len);
                Entry::NonTensor(
                    v.index(index)
                        .cloned()
                        .ok_or_else(|| TensorDictError::IndexOutOfRange { index, len })?,
                )
            }
        })
    }
}

impl From<Tensor> for Entry {
    fn from(t: Tensor) -> Self {
        Entry::Tensor(t)
    }
}

impl From<NonTensor> for Entry {
    fn from(v: NonTensor) -> Self {
        Entry::NonTensor(v)
    }
}

impl From<TensorDict> for Entry {
    fn from(d: TensorDict) -> Self {
        Entry::Dict(d)
    }
}

/// A top-level key resolved once for many lookups: the key, and where and
/// under which name it was found the last time. A lookup through it
/// ([`TensorDict::get_by`], [`TensorDict::tensor_mut_by`]) compares one
/// pointer while the tensordict keeps its keys (an env's buffers, reused
/// from step to step); in any other tensordict, or after its layout
/// changed, it searches by the key as [`TensorDict::get`] does and
/// remembers the new place.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The key; after a hit, the found entry's own name (equal bytes), so
    /// that the next lookup in the same tensordict is a pointer comparison.
    /// Held, so no other name can take its address.
    key: Name,
    /// Where it was found the last time.
    at: usize,
}

impl Lookup {
    /// A lookup of top-level `key`.
    pub fn new(key: &str) -> Lookup {
        Lookup {
            key: key.into(),
            at: 0,
        }
    }

    /// The key looked up.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// Mutable access to a tensor inside a tensordict: its elements can change,
/// its shape and dtype cannot (so the batch size stays valid).
#[derive(Debug)]
pub struct TensorMut<'a>(&'a mut Tensor);

impl TensorMut<'_> {
    /// See [`Tensor::as_mut_slice`].
    pub fn as_mut_slice<T: crate::Element>(&mut self) -> Result<&mut [T], TensorDictError> {
        self.0.as_mut_slice()
    }

    /// See [`Tensor::fill`].
    #[inline]
    pub fn fill<T: crate::Element>(&mut self, value: T) -> Result<(), TensorDictError> {
        self.0.fill(value)
    }

    /// See [`Tensor::bytes_mut`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.bytes_mut()
    }

    /// See [`Tensor::copy_from`].
    pub fn copy_from(&mut self, src: &Tensor) -> Result<(), TensorDictError> {
        self.0.copy_from(src)
    }
}

impl Deref for TensorMut<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        self.0
    }
}

/// A dictionary of tensors that share leading batch dimensions, with nested
/// sub-dicts and non-tensor values: the data model of every step.
///
/// Keys are kept sorted, so iteration, display and encoding are
/// deterministic. Cloning is cheap (tensors share storage and copy on write).
///
/// ```
/// use tensordict::{NonTensor, Tensor, TensorDict};
/// # fn main() -> Result<(), tensordict::TensorDictError> {
/// let mut td = TensorDict::new(&[2]);
/// td.set("observation", Tensor::zeros(tensordict::DType::F32, &[2, 4]))?;
/// td.set(("next", "reward"), Tensor::full(&[2, 1], 1.0f32))?;
/// td.set("env_index", NonTensor::from(vec![0i64, 1]))?;
/// assert!(td.contains(("next", "reward")));
/// assert_eq!(td.tensor(("next", "reward"))?.shape(), &[2, 1]);
/// // The batch size is checked:
/// assert!(td.set("bad", Tensor::zeros(tensordict::DType::F32, &[3])).is_err());
/// let rows = td.unbind()?;
/// assert_eq!(rows[1].non_tensor("env_index")?, &NonTensor::Int(1));
/// println!("{td}");
/// # Ok(()) }
/// ```
#[derive(Debug, PartialEq, Default)]
pub struct TensorDict {
    batch_size: Shape,
    entries: Entries,
}

impl Clone for TensorDict {
    /// Shares every tensor's storage (copy on write; a lent row's view is
    /// copied: [`Tensor`]'s clone).
    fn clone(&self) -> TensorDict {
        self.clone_with_room(0)
    }
}

impl TensorDict {
    /// An empty tensordict with this batch size.
    pub fn new(batch_size: &[usize]) -> TensorDict {
        TensorDict {
            batch_size: shape_of(batch_size),
            entries: Entries::default(),
        }
    }

    /// The batch size: the leading dims every entry shares.
    #[inline]
    pub fn batch_size(&self) -> &[usize] {
        &self.batch_size
    }

    /// Number of root entries (sub-dicts count as one).
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// A clone (as [`Clone::clone`]) with room for `additional` more root
    /// entries: one allocation where a clone and a [`TensorDict::reserve`]
    /// would take two.
    ///
    /// ```
    /// use tensordict::{Tensor, TensorDict};
    /// let mut td = TensorDict::new(&[2]);
    /// td.set("a", Tensor::full(&[2], 1.0f32)).unwrap();
    /// let mut more = td.clone_with_room(1);
    /// more.set("b", Tensor::full(&[2], 2i64)).unwrap();
    /// assert_eq!((td.len(), more.len()), (1, 2));
    /// ```
    pub fn clone_with_room(&self, additional: usize) -> TensorDict {
        TensorDict {
            batch_size: shape_of(&self.batch_size),
            entries: self.entries.clone_with_room(additional),
        }
    }

    /// Makes room for `additional` more root entries, so that as many
    /// [`TensorDict::set`]s of new keys move the entries at most once.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// True if there is no entry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The root entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, v)| (&**k, v))
    }

    fn available(&self) -> Vec<String> {
        self.entries.keys().map(|k| k.to_string()).collect()
    }

    fn not_found(&self, key: &impl KeyLike) -> TensorDictError {
        TensorDictError::KeyNotFound {
            key: key.to_key(),
            available: self.available(),
        }
    }

    fn check_entry(&self, key: &impl KeyLike, entry: &Entry) -> Result<(), TensorDictError> {
        if !entry.shape_starts_with(&self.batch_size) {
            return Err(TensorDictError::BatchSize {
                key: key.to_key(),
                shape: entry.shape().to_vec(),
                batch_size: self.batch_size.to_vec(),
            });
        }
        Ok(())
    }

    /// Sets an entry, creating the sub-dicts on its path (with this batch
    /// size). An error if its leading dims are not the batch size, if the key
    /// is empty, or if a part of its path is not a sub-dict.
    pub fn set(
        &mut self,
        key: impl KeyLike,
        value: impl Into<Entry>,
    ) -> Result<(), TensorDictError> {
        let value = value.into();
        if let Some(name) = key.single().filter(|name| !name.is_empty()) {
            // A key of one part: no parts to build, and a shared name
            // stored as it is.
            self.check_entry(&key, &value)?;
            let name = key.shared().unwrap_or_else(|| Name::from(name));
            self.entries.insert(name, value);
            return Ok(());
        }
        let parts = key.key_parts();
        if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
            return Err(TensorDictError::InvalidKey { key: key.to_key() });
        }
        self.check_entry(&key, &value)?;
        let (leaf, path) = parts.split_last().expect("non-empty");
        let mut node = self;
        for (depth, part) in path.iter().enumerate() {
            let batch = node.batch_size.clone();
            let entry = node
                .entries
                .get_or_insert_with(part, || Entry::Dict(TensorDict::new(&batch)));
            node = match entry {
                Entry::Dict(d) => d,
                other => {
                    return Err(TensorDictError::WrongKind {
                        key: NestedKey::new(parts[..=depth].iter().copied()),
                        expected: "tensordict",
                        found: other.kind(),
                    })
                }
            };
        }
        // A sub-dict's batch size may be longer than the root's (checked
        // above when the entry goes to the root itself).
        if !path.is_empty() {
            node.check_entry(&key, &value)?;
        }
        node.entries.insert(Name::from(*leaf), value);
        Ok(())
    }

    /// The entry at `key`, if any.
    pub fn get(&self, key: impl KeyLike) -> Option<&Entry> {
        if let Some(name) = key.single() {
            return self.entries.get(name);
        }
        let parts = key.key_parts();
        let (leaf, path) = parts.split_last()?;
        let mut node = self;
        for part in path {
            node = node.entries.get(part)?.as_dict()?;
        }
        node.entries.get(leaf)
    }

    fn get_or_err(&self, key: &impl KeyLike) -> Result<&Entry, TensorDictError> {
        if let Some(Ok(i)) = key.single().map(|name| self.entries.position(name)) {
            return Ok(self.entries.at(i));
        }
        let parts = key.key_parts();
        let (leaf, path) = parts
            .split_last()
            .ok_or_else(|| TensorDictError::InvalidKey { key: key.to_key() })?;
        let mut node = self;
        for (depth, part) in path.iter().enumerate() {
            node = match node.entries.get(part) {
                Some(Entry::Dict(d)) => d,
                Some(other) => {
                    return Err(TensorDictError::WrongKind {
                        key: NestedKey::new(parts[..=depth].iter().copied()),
                        expected: "tensordict",
                        found: other.kind(),
                    })
                }
                None => return Err(node.not_found(key)),
            };
        }
        node.entries.get(leaf).ok_or_else(|| node.not_found(key))
    }

    /// The tensor at `key`; an error naming the key if it is missing or not
    /// a tensor.
    pub fn tensor(&self, key: impl KeyLike) -> Result<&Tensor, TensorDictError> {
        match self.get_or_err(&key)? {
            Entry::Tensor(t) => Ok(t),
            other => Err(TensorDictError::WrongKind {
                key: key.to_key(),
                expected: "tensor",
                found: other.kind(),
            }),
        }
    }

    /// The non-tensor value at `key`; an error naming the key if it is
    /// missing or of another kind.
    pub fn non_tensor(&self, key: impl KeyLike) -> Result<&NonTensor, TensorDictError> {
        match self.get_or_err(&key)? {
            Entry::NonTensor(v) => Ok(v),
            other => Err(TensorDictError::WrongKind {
                key: key.to_key(),
                expected: "non-tensor",
                found: other.kind(),
            }),
        }
    }

    /// The sub-dict at `key`; an error naming the key if it is missing or of
    /// another kind.
    pub fn dict(&self, key: impl KeyLike) -> Result<&TensorDict, TensorDictError> {
        match self.get_or_err(&key)? {
            Entry::Dict(d) => Ok(d),
            other => Err(TensorDictError::WrongKind {
                key: key.to_key(),
                expected: "tensordict",
                found: other.kind(),
            }),
        }
    }

    /// The entry at `key`, writable in place only: for [`TensorDict::tensor_mut`],
    /// whose [`TensorMut`] cannot replace a tensor (a lent view keeps its
    /// stamp: `Entries`).
    fn get_mut_or_err(&mut self, key: &impl KeyLike) -> Result<&mut Entry, TensorDictError> {
        // One level (the common case): one lookup, no parts built. A miss
        // takes the general path below, which builds the error.
        if let Some(Ok(i)) = key.single().map(|name| self.entries.position(name)) {
            return Ok(self.entries.at_mut_in_place(i));
        }
        // Find the position at each level immutably (errors need `&self`),
        // then walk down mutably by position: one lookup per level.
        let parts = key.key_parts();
        let mut path: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        {
            let mut node: &TensorDict = self;
            for (depth, part) in parts.iter().enumerate() {
                let Ok(i) = node.entries.position(part) else {
                    return Err(self
                        .get_or_err(key)
                        .err()
                        .unwrap_or_else(|| node.not_found(key)));
                };
                path.push(i);
                if depth + 1 < parts.len() {
                    node = match node.entries.at(i) {
                        Entry::Dict(d) => d,
                        _ => {
                            return Err(self
                                .get_or_err(key)
                                .err()
                                .unwrap_or_else(|| node.not_found(key)))
                        }
                    };
                }
            }
        }
        if path.is_empty() {
            return Err(TensorDictError::InvalidKey { key: key.to_key() });
        }
        let (last, inner) = path.split_last().expect("non-empty");
        let mut node = self;
        for &i in inner {
            node = match node.entries.at_mut_in_place(i) {
                Entry::Dict(d) => d,
                _ => unreachable!("a sub-dict on the path found above"),
            };
        }
        Ok(node.entries.at_mut_in_place(*last))
    }

    /// Write access to the elements of the tensor at `key` (copy on write if
    /// shared); its shape and dtype cannot change.
    pub fn tensor_mut(&mut self, key: impl KeyLike) -> Result<TensorMut<'_>, TensorDictError> {
        match self.get_mut_or_err(&key)? {
            Entry::Tensor(t) => Ok(TensorMut(t)),
            other => Err(TensorDictError::WrongKind {
                key: key.to_key(),
                expected: "tensor",
                found: other.kind(),
            }),
        }
    }

    /// The tensor at `lookup`'s key, writable: an env that writes the same
    /// keys into the same buffers on every step compares one pointer per
    /// key instead of searching (see [`Lookup`]). Errors are
    /// [`TensorDict::tensor_mut`]'s.
    ///
    /// ```
    /// use tensordict::{DType, Lookup, Tensor, TensorDict};
    /// # fn main() -> Result<(), tensordict::TensorDictError> {
    /// let mut td = TensorDict::new(&[]);
    /// td.set("done", Tensor::zeros(DType::Bool, &[1]))?;
    /// td.set("reward", Tensor::zeros(DType::F32, &[1]))?;
    /// let mut reward = Lookup::new("reward");
    /// for step in 0..3 {
    ///     td.tensor_mut_by(&mut reward)?.as_mut_slice::<f32>()?[0] = step as f32;
    /// }
    /// assert_eq!(td.tensor("reward")?.to_vec::<f32>()?, vec![2.0]);
    /// assert!(td.tensor_mut_by(&mut Lookup::new("missing")).is_err());
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn tensor_mut_by(&mut self, lookup: &mut Lookup) -> Result<TensorMut<'_>, TensorDictError> {
        match self.entries.find(&mut lookup.key, &mut lookup.at) {
            Some(i) if matches!(self.entries.at(i), Entry::Tensor(_)) => {
                // In place: a `TensorMut` cannot replace the tensor.
                match self.entries.at_mut_in_place(i) {
                    Entry::Tensor(t) => Ok(TensorMut(t)),
                    _ => unreachable!("a tensor, checked above"),
                }
            }
            // Missing, or not a tensor: the plain lookup's error.
            _ => self.tensor_mut(lookup.key()),
        }
    }

    /// The entry at `lookup`'s key (see [`TensorDict::tensor_mut_by`]).
    #[inline]
    pub fn get_by(&self, lookup: &mut Lookup) -> Option<&Entry> {
        let i = self.entries.find(&mut lookup.key, &mut lookup.at)?;
        Some(self.entries.at(i))
    }

    /// Removes and returns the entry at `key`, if any.
    pub fn remove(&mut self, key: impl KeyLike) -> Option<Entry> {
        let parts = key.key_parts();
        let (leaf, path) = parts.split_last()?;
        let mut node = self;
        for part in path {
            node = match node.entries.get_mut(part)? {
                Entry::Dict(d) => d,
                _ => return None,
            };
        }
        node.entries.remove(leaf)
    }

    /// True if there is an entry at `key`.
    pub fn contains(&self, key: impl KeyLike) -> bool {
        self.get(key).is_some()
    }

    /// The keys, in order. With `include_nested`, the keys inside sub-dicts
    /// too (depth first); with `leaves_only`, no key of a sub-dict itself.
    pub fn keys(&self, include_nested: bool, leaves_only: bool) -> Vec<NestedKey> {
        self.items(include_nested, leaves_only)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// The entries with their keys; the flags as for [`TensorDict::keys`].
    pub fn items(&self, include_nested: bool, leaves_only: bool) -> Vec<(NestedKey, &Entry)> {
        let mut out = Vec::new();
        self.collect_items(&NestedKey::default(), include_nested, leaves_only, &mut out);
        out
    }

    fn collect_items<'a>(
        &'a self,
        prefix: &NestedKey,
        include_nested: bool,
        leaves_only: bool,
        out: &mut Vec<(NestedKey, &'a Entry)>,
    ) {
        for (name, entry) in &self.entries {
            let key = prefix.child(name);
            match entry {
                Entry::Dict(d) => {
                    if !leaves_only {
                        out.push((key.clone(), entry));
                    }
                    if include_nested {
                        d.collect_items(&key, include_nested, leaves_only, out);
                    }
                }
                _ => out.push((key, entry)),
            }
        }
    }

    /// The tensors of this tensordict and of its sub-dicts, mutably, in the
    /// order of [`TensorDict::items`]`(true, true)` (non-tensor leaves
    /// left out): for a writer that fills many columns at once.
    ///
    /// ```
    /// use tensordict::{DType, Tensor, TensorDict};
    /// # fn main() -> Result<(), tensordict::TensorDictError> {
    /// let mut td = TensorDict::new(&[]);
    /// td.set("reward", Tensor::zeros(DType::F32, &[]))?;
    /// td.set(("next", "done"), Tensor::zeros(DType::Bool, &[]))?;
    /// let dtypes: Vec<DType> = td.tensors_mut().iter().map(|t| t.dtype()).collect();
    /// assert_eq!(dtypes, [DType::Bool, DType::F32]); // "next" sorts first
    /// # Ok(()) }
    /// ```
    pub fn tensors_mut(&mut self) -> Vec<&mut Tensor> {
        let mut out = Vec::new();
        self.collect_tensors_mut(&mut out);
        out
    }

    fn collect_tensors_mut<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        for (_, entry) in self.entries.iter_mut() {
            match entry {
                Entry::Dict(d) => d.collect_tensors_mut(out),
                Entry::Tensor(t) => out.push(t),
                Entry::NonTensor(_) => {}
            }
        }
    }

    /// A tensordict with only `keys` (and the sub-dicts on their paths).
    /// With `strict`, a missing key is an error; otherwise it is skipped.
    pub fn select<K: KeyLike>(
        &self,
        keys: impl IntoIterator<Item = K>,
        strict: bool,
    ) -> Result<TensorDict, TensorDictError> {
        let mut out = TensorDict::new(&self.batch_size);
        for key in keys {
            match self.get_or_err(&key) {
                Ok(entry) => out.set_unchecked_path(&key, entry.clone(), self)?,
                Err(err) if strict => return Err(err),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// Sets `entry` at `key`, creating sub-dicts with the batch sizes they
    /// have in `like`.
    fn set_unchecked_path(
        &mut self,
        key: &impl KeyLike,
        entry: Entry,
        like: &TensorDict,
    ) -> Result<(), TensorDictError> {
        let parts = key.key_parts();
        let (leaf, path) = parts.split_last().expect("looked up");
        let mut node = self;
        let mut src = like;
        for part in path {
            src = src.dict(*part)?;
            let batch = src.batch_size.clone();
            node = match node
                .entries
                .get_or_insert_with(part, || Entry::Dict(TensorDict::new(&batch)))
            {
                Entry::Dict(d) => d,
                _ => unreachable!("a sub-dict in `like`"),
            };
        }
        node.entries.insert(Name::from(*leaf), entry);
        Ok(())
    }

    /// A copy without the entries at `keys` (missing keys are ignored).
    pub fn exclude<K: KeyLike>(&self, keys: impl IntoIterator<Item = K>) -> TensorDict {
        let mut out = self.clone();
        for key in keys {
            out.remove(key);
        }
        out
    }

    /// Sets every leaf of `other` into this tensordict (sub-dicts merged,
    /// leaves replaced). An error (and nothing changed) if a leaf does not fit
    /// the batch size.
    pub fn update(&mut self, other: &TensorDict) -> Result<(), TensorDictError> {
        let mut staged = self.clone();
        for (key, entry) in other.items(true, true) {
            staged.set(&key, entry.clone())?;
        }
        // Empty sub-dicts of `other` are kept too.
        for (key, entry) in other.items(true, false) {
            if let Entry::Dict(d) = entry {
                if d.is_empty() && !staged.contains(&key) {
                    staged.set(&key, entry.clone())?;
                }
            }
        }
        *self = staged;
        Ok(())
    }

    /// Row `index` along the first batch dim (tensors are views: no copy).
    pub fn index(&self, index: usize) -> Result<TensorDict, TensorDictError> {
        let len = *self
            .batch_size
            .first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "index" })?;
        if index >= len {
            return Err(TensorDictError::IndexOutOfRange { index, len });
        }
        let mut out = TensorDict {
            batch_size: shape_of(&self.batch_size[1..]),
            entries: Entries::with_capacity(self.entries.len()),
        };
        for (name, entry) in &self.entries {
            out.entries
                .push_sorted(Name::clone(name), entry.index(index)?);
        }
        Ok(out)
    }

    /// Every row along the first batch dim (tensors are views: no copy).
    pub fn unbind(&self) -> Result<Vec<TensorDict>, TensorDictError> {
        let len = *self
            .batch_size
            .first()
            .ok_or_else(|| TensorDictError::ZeroDim { what: "unbind" })?;
        (0..len).map(|i| self.index(i)).collect()
    }

    /// A tensordict of `entries` (sorted, each of batch size starting with
    /// `batch_size`), for crate code that built them so.
    pub(crate) fn from_entries(batch_size: Shape, entries: Entries) -> TensorDict {
        TensorDict {
            batch_size,
            entries,
        }
    }

    /// Inserts without checks; for crate code that built a valid entry.
    pub(crate) fn insert_raw(&mut self, name: Name, entry: Entry) {
        self.entries.insert(name, entry);
    }

    pub(crate) fn entries(&self) -> &Entries {
        &self.entries
    }

    pub(crate) fn entries_mut(&mut self) -> &mut Entries {
        &mut self.entries
    }
}

fn write_shape(out: &mut String, shape: &[usize]) {
    let _ = write!(out, "{shape:?}");
}

impl TensorDict {
    pub(crate) fn fmt_indented(&self, out: &mut String, indent: usize, name: &str) {
        let pad = " ".repeat(indent);
        let _ = writeln!(out, "{name}(");
        let _ = write!(out, "{pad}    fields={{");
        let mut first = true;
        for (key, entry) in &self.entries {
            out.push_str(if first { "\n" } else { ",\n" });
            first = false;
            let _ = write!(out, "{pad}        {key}: ");
            fmt_entry(out, entry, indent + 8);
        }
        let _ = write!(out, "}},\n{pad}    batch_size=");
        write_shape(out, &self.batch_size);
        out.push(')');
    }
}

pub(crate) fn fmt_entry(out: &mut String, entry: &Entry, indent: usize) {
    match entry {
        Entry::Tensor(t) => {
            let _ = write!(out, "Tensor(shape={:?}, dtype={})", t.shape(), t.dtype());
        }
        Entry::NonTensor(v @ NonTensor::Stack(_)) => {
            let _ = write!(
                out,
                "NonTensorStack({v}, batch_size={:?})",
                v.shape().as_slice()
            );
        }
        Entry::NonTensor(v) => {
            let _ = write!(out, "NonTensorData(data={v})");
        }
        Entry::Dict(d) => d.fmt_indented(out, indent, "TensorDict"),
    }
}

/// In the style of TorchRL's repr: each field with its shape and dtype,
/// sorted by key, and the batch size.
impl fmt::Display for TensorDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.fmt_indented(&mut out, 0, "TensorDict");
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn sample() -> TensorDict {
        let mut td = TensorDict::new(&[2]);
        td.set("observation", Tensor::zeros(DType::F32, &[2, 3]))
            .unwrap();
        td.set("action", Tensor::zeros(DType::I64, &[2, 1]))
            .unwrap();
        td.set(("next", "reward"), Tensor::full(&[2, 1], 1.0f32))
            .unwrap();
        td.set(("next", "done"), Tensor::zeros(DType::Bool, &[2, 1]))
            .unwrap();
        td.set("env_index", NonTensor::from(vec![0i64, 1])).unwrap();
        td
    }

    /// A key given as a shared name is stored as that name (no copy of
    /// it); set, replaced and checked like any other key; `reserve` only
    /// makes room.
    #[test]
    fn a_shared_name_is_stored_as_it_is() {
        let name: std::sync::Arc<str> = "next".into();
        let mut td = TensorDict::new(&[2]);
        td.reserve(2);
        td.set(&name, Tensor::zeros(DType::F32, &[2, 3])).unwrap();
        let (stored, _) = td.entries().at_named(0);
        assert!(
            std::ptr::eq(stored.as_ptr(), name.as_ptr()),
            "the very name"
        );
        td.set(&name, Tensor::full(&[2], 1.0f32)).unwrap();
        assert_eq!(td.len(), 1);
        assert_eq!(
            td.tensor("next").unwrap().to_vec::<f32>().unwrap(),
            vec![1.0, 1.0]
        );
        assert!(matches!(
            td.set(&name, Tensor::zeros(DType::F32, &[3])),
            Err(TensorDictError::BatchSize { .. })
        ));
        let empty: std::sync::Arc<str> = "".into();
        assert!(matches!(
            td.set(&empty, Tensor::zeros(DType::F32, &[2])),
            Err(TensorDictError::InvalidKey { .. })
        ));
    }

    #[test]
    fn set_get_contains_remove() {
        let mut td = sample();
        assert!(td.contains("observation"));
        assert!(td.contains(("next", "reward")));
        assert!(!td.contains(("next", "nope")));
        assert_eq!(td.dict("next").unwrap().batch_size(), &[2]);
        assert!(matches!(td.get("next"), Some(Entry::Dict(_))));
        assert!(td.remove(("next", "done")).is_some());
        assert!(!td.contains(("next", "done")));
        assert!(td.remove("missing").is_none());
    }

    #[test]
    fn batch_size_is_enforced_with_a_message_naming_the_key() {
        let mut td = TensorDict::new(&[2]);
        let err = td
            .set(("next", "obs"), Tensor::zeros(DType::F32, &[3, 2]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"entry ("next", "obs") has shape [3, 2], whose leading dims do not match the batch size [2]"#
        );
        assert!(td.set("idx", NonTensor::from(vec![1i64, 2, 3])).is_err());
        assert!(td.set("s", NonTensor::from("scalar")).is_err());
        // Sub-dicts may have longer batch sizes that start with the parent's.
        let sub = TensorDict::new(&[2, 5]);
        td.set("sub", sub).unwrap();
        assert!(td
            .set(("sub", "x"), Tensor::zeros(DType::U8, &[2, 4]))
            .is_err());
        td.set(("sub", "x"), Tensor::zeros(DType::U8, &[2, 5, 1]))
            .unwrap();
    }

    #[test]
    fn lookup_errors_name_the_key_and_list_what_is_there() {
        let td = sample();
        let err = td.tensor("obs").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"key "obs" not found; keys present: [action, env_index, next, observation]"#
        );
        let err = td.tensor("next").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"entry "next" is a tensordict, not a tensor"#
        );
        let err = td.tensor(("observation", "x")).unwrap_err();
        assert!(matches!(err, TensorDictError::WrongKind { .. }));
        assert!(td.non_tensor("observation").is_err());
        assert!(td.dict("observation").is_err());
        let mut td = td;
        assert!(td.tensor_mut("env_index").is_err());
        assert!(td.set("", Tensor::scalar(1u8)).is_err());
        assert!(td
            .set(("observation", "x"), Tensor::zeros(DType::U8, &[2]))
            .is_err());
    }

    /// A hint from another tensordict (other keys, another order) still
    /// finds the key, and is corrected; a key that is not a tensor, or is
    /// missing, gives the plain lookup's error.
    #[test]
    fn lookups_follow_the_tensordict_they_are_used_in() {
        let mut a = TensorDict::new(&[]);
        a.set("b", Tensor::full(&[1], 1i32)).unwrap();
        a.set("c", Tensor::full(&[1], 2i32)).unwrap();
        let mut b = TensorDict::new(&[]);
        for key in ["a", "b", "c"] {
            b.set(key, Tensor::full(&[1], 9i32)).unwrap();
        }
        b.set("s", NonTensor::Int(3)).unwrap();
        let mut c = Lookup::new("c");
        for (in_a, value) in [(true, 5), (false, 6), (false, 7), (true, 8)] {
            let td = if in_a { &mut a } else { &mut b };
            td.tensor_mut_by(&mut c)
                .unwrap()
                .as_mut_slice::<i32>()
                .unwrap()[0] = value;
            assert_eq!(c.key(), "c");
        }
        assert_eq!(a.tensor("c").unwrap().to_vec::<i32>().unwrap(), [8]);
        assert_eq!(b.tensor("c").unwrap().to_vec::<i32>().unwrap(), [7]);
        // A layout changed under a lookup: found again by its key.
        a.set("a", Tensor::full(&[1], 0i32)).unwrap();
        a.remove("c");
        a.set("c", Tensor::full(&[1], 4i32)).unwrap();
        assert_eq!(
            a.get_by(&mut c).and_then(Entry::as_tensor),
            a.tensor("c").ok()
        );
        let wrong = b.tensor_mut_by(&mut Lookup::new("s")).unwrap_err();
        assert_eq!(wrong, b.tensor_mut("s").unwrap_err());
        let missing = b.tensor_mut_by(&mut Lookup::new("z")).unwrap_err();
        assert_eq!(missing, b.tensor_mut("z").unwrap_err());
        assert!(b.get_by(&mut Lookup::new("z")).is_none());
    }

    #[test]
    fn tensor_mut_writes_without_changing_other_holders() {
        let mut td = sample();
        let before = td.clone();
        td.tensor_mut("observation")
            .unwrap()
            .as_mut_slice::<f32>()
            .unwrap()[0] = 5.0;
        assert_eq!(
            td.tensor("observation").unwrap().to_vec::<f32>().unwrap()[0],
            5.0
        );
        assert_eq!(
            before
                .tensor("observation")
                .unwrap()
                .to_vec::<f32>()
                .unwrap()[0],
            0.0
        );
    }

    #[test]
    fn keys_and_items() {
        let td = sample();
        let all: Vec<String> = td.keys(true, false).iter().map(|k| k.to_string()).collect();
        assert_eq!(
            all,
            [
                r#""action""#,
                r#""env_index""#,
                r#""next""#,
                r#"("next", "done")"#,
                r#"("next", "reward")"#,
                r#""observation""#
            ]
        );
        assert_eq!(td.keys(true, true).len(), 5);
        assert_eq!(td.keys(false, false).len(), 4);
        assert_eq!(td.keys(false, true).len(), 3);
        assert_eq!(td.items(true, true).len(), 5);
    }

    #[test]
    fn select_exclude_update() {
        let td = sample();
        let sel = td
            .select([NestedKey::from(("next", "reward")), "action".into()], true)
            .unwrap();
        assert_eq!(sel.keys(true, true).len(), 2);
        assert!(td.select(["nope"], true).is_err());
        assert_eq!(td.select(["nope", "action"], false).unwrap().len(), 1);
        let ex = td.exclude(["next", "nope"]);
        assert!(!ex.contains("next"));
        assert_eq!(ex.len(), 3);
        let mut base = ex.clone();
        base.update(&td).unwrap();
        assert_eq!(base, td);
        let mut wrong = TensorDict::new(&[3]);
        wrong.set("x", Tensor::zeros(DType::U8, &[3])).unwrap();
        let mut copy = td.clone();
        assert!(copy.update(&wrong).is_err());
        assert_eq!(copy, td);
    }

    #[test]
    fn index_and_unbind_give_rows() {
        let td = sample();
        let rows = td.unbind().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].batch_size(), &[] as &[usize]);
        assert_eq!(rows[1].tensor("observation").unwrap().shape(), &[3]);
        assert_eq!(rows[0].non_tensor("env_index").unwrap(), &NonTensor::Int(0));
        assert!(rows[0]
            .tensor("observation")
            .unwrap()
            .shares_storage(td.tensor("observation").unwrap()));
        assert!(td.index(2).is_err());
        assert!(rows[0].unbind().is_err());
    }

    #[test]
    fn display_looks_like_torchrl() {
        let shown = sample().to_string();
        let expected = "TensorDict(
    fields={
        action: Tensor(shape=[2, 1], dtype=i64),
        env_index: NonTensorStack([0, 1], batch_size=[2]),
        next: TensorDict(
            fields={
                done: Tensor(shape=[2, 1], dtype=bool),
                reward: Tensor(shape=[2, 1], dtype=f32)},
            batch_size=[2]),
        observation: Tensor(shape=[2, 3], dtype=f32)},
    batch_size=[2])";
        assert_eq!(shown, expected);
    }
}
