//! `Schema`: the keys, dtypes and shapes of the tensors that one area of a
//! shared-memory slot holds, built from a template tensordict, compared
//! across envs, checked against each write, and encoded to travel to
//! another process.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use tensordict::{
    ByteReader, DType, Entry, KeyLike, NestedKey, ReadError, Shape, Tensor, TensorDict,
};

use crate::error::{SchemaDecodeError, SchemaError};

/// One tensor of a [`Schema`]: its key, dtype and shape (the full shape,
/// batch dims included), its size in bytes, and whether it is
/// length-prefixed ([`Field::is_sized`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    key: NestedKey,
    dtype: DType,
    shape: Shape,
    nbytes: usize,
    sized: bool,
}

/// The bytes of a length-prefixed field's header: a little-endian `u32`.
pub const SIZE_HEADER: usize = 4;

/// How many bytes of a length-prefixed field's `bytes` are meaningful: the
/// header and the count it holds, at most all of them (a header that
/// counts past the end, or a torn one, means the whole field).
#[inline]
#[cfg_attr(loom, allow(dead_code))] // its readers are not part of the loom build
pub(crate) fn sized_len(bytes: &[u8]) -> usize {
    match bytes.first_chunk::<SIZE_HEADER>() {
        Some(header) => usize::try_from(u32::from_le_bytes(*header))
            .ok()
            .and_then(|n| n.checked_add(SIZE_HEADER))
            .map_or(bytes.len(), |n| n.min(bytes.len())),
        None => bytes.len(),
    }
}

impl Field {
    /// A field; an error if the key is not valid (no part, or an empty
    /// part) or if the size in bytes overflows `usize`.
    pub fn new(
        key: impl Into<NestedKey>,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Field, SchemaError> {
        let key = key.into();
        if !key.is_valid() {
            return Err(SchemaError::InvalidKey { key });
        }
        let nbytes = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| SchemaError::FieldTooLarge {
                key: key.clone(),
                dtype,
                shape: shape.to_vec(),
            })?;
        Ok(Field {
            key,
            dtype,
            shape: shape.into(),
            nbytes,
            sized: false,
        })
    }

    /// Whether the field is length-prefixed: a `u8` field of one dimension
    /// whose first [`SIZE_HEADER`] bytes are a little-endian `u32` count of
    /// the meaningful bytes that follow (what rlpool's Python envs put in
    /// their `"info"` entry, usually empty). The exchange then copies the
    /// header and those bytes only; the bytes past them are unspecified.
    pub fn is_sized(&self) -> bool {
        self.sized
    }

    /// Whether the field can be length-prefixed: `u8`, one dimension, room
    /// for the header.
    fn can_be_sized(&self) -> bool {
        self.dtype == DType::U8 && self.shape.len() == 1 && self.nbytes >= SIZE_HEADER
    }

    /// The key.
    pub fn key(&self) -> &NestedKey {
        &self.key
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, batch dims included.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Cannot overflow: the size in bytes was checked in `Field::new`.
        self.shape.iter().product()
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }
}

/// `("next", "reward"): f32[1]`.
/// A length-prefixed field ends with `, sized`.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}{:?}", self.key, self.dtype, self.shape.as_slice())?;
        if self.sized {
            f.write_str(", sized")?;
        }
        Ok(())
    }
}

/// The fixed shape of the data in one area of a shared-memory slot: the
/// tensor leaves of a template tensordict (key, dtype, shape), in key order,
/// and the batch sizes of the tensordict and its sub-dicts.
///
/// Built from one env's template ([`Schema::from_template`]) or from every
/// env's ([`Schema::validate_envs`], which requires them to agree), or from
/// fields directly ([`Schema::new`]). Fields are sorted by key (parts
/// compared in order), which is the order in which a tensordict's leaves
/// come; [`Schema::field`] finds one by binary search without allocating.
///
/// ```
/// use exchange::Schema;
/// use tensordict::{DType, Tensor, TensorDict};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut template = TensorDict::new(&[]);
/// template.set("observation", Tensor::zeros(DType::F32, &[4]))?;
/// template.set(("next", "reward"), Tensor::zeros(DType::F32, &[1]))?;
/// let schema = Schema::from_template(&template)?;
/// assert_eq!(schema.nbytes(), 20);
/// assert_eq!(schema.field(("next", "reward")).unwrap().shape(), &[1]);
///
/// // Every write is checked against it.
/// let mut step = schema.zeros();
/// schema.check(&step)?;
/// step.set("extra", Tensor::zeros(DType::U8, &[2]))?;
/// assert!(schema.check(&step).is_err());
///
/// // It travels to another process as bytes.
/// assert_eq!(Schema::decode(&schema.encode())?, schema);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Schema {
    batch_size: Shape,
    /// Sorted by key, each key once.
    fields: Vec<Field>,
    /// Every sub-dict (parents before children) with its batch size, sorted
    /// by key: kept so that empty sub-dicts and sub-dicts with longer batch
    /// sizes survive a round trip.
    dicts: Vec<(NestedKey, Shape)>,
    /// Sum of the fields' sizes.
    nbytes: usize,
}

/// Compares a key's parts with borrowed parts, in the order of
/// `NestedKey`'s `Ord` (part by part, then length).
fn cmp_parts(key: &[String], parts: &[&str]) -> Ordering {
    key.iter().map(String::as_str).cmp(parts.iter().copied())
}

impl Schema {
    /// A schema of these fields, whose sub-dicts (the paths of nested keys)
    /// all have `batch_size`. An error if a key is repeated, is both a
    /// tensor and a sub-dict, or has a shape that does not start with the
    /// batch size, or if the sizes add up to more than `usize` holds.
    pub fn new(batch_size: &[usize], fields: Vec<Field>) -> Result<Schema, SchemaError> {
        Schema::from_parts(batch_size, fields, Vec::new())
    }

    /// An empty schema (no field) with this batch size: an area that holds
    /// nothing.
    pub fn empty(batch_size: &[usize]) -> Schema {
        Schema {
            batch_size: batch_size.into(),
            ..Schema::default()
        }
    }

    /// The schema of a template tensordict (a "fake" one, as an env's
    /// `fake_tensordict` gives): every tensor leaf, and the batch sizes of
    /// the tensordict and of its sub-dicts. An error naming the key if a
    /// leaf is not a tensor: such data travels through the queue exchange.
    pub fn from_template(td: &TensorDict) -> Result<Schema, SchemaError> {
        let mut fields = Vec::new();
        let mut dicts = Vec::new();
        for (key, entry) in td.items(true, false) {
            match entry {
                Entry::Tensor(t) => fields.push(Field::new(key, t.dtype(), t.shape())?),
                Entry::Dict(d) => dicts.push((key, Shape::from(d.batch_size()))),
                Entry::NonTensor(_) => {
                    return Err(SchemaError::NonTensorLeaf {
                        key,
                        kind: "non-tensor value",
                        env: None,
                    })
                }
            }
        }
        Schema::from_parts(td.batch_size(), fields, dicts)
    }

    /// This schema with the fields at `keys` length-prefixed
    /// ([`Field::is_sized`]); a key that names no field, or a field that is
    /// not `u8` of one dimension with room for the header, is left as it
    /// is (copied whole, which is always correct).
    ///
    /// ```
    /// use exchange::Schema;
    /// use tensordict::{DType, NestedKey, Tensor, TensorDict};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut template = TensorDict::new(&[]);
    /// template.set("info", Tensor::zeros(DType::U8, &[1028]))?;
    /// template.set("observation", Tensor::zeros(DType::F32, &[4]))?;
    /// let keys = [NestedKey::from("info"), NestedKey::from("observation")];
    /// let schema = Schema::from_template(&template)?.with_sized(&keys);
    /// assert!(schema.field("info").unwrap().is_sized());
    /// assert!(!schema.field("observation").unwrap().is_sized(), "f32: copied whole");
    /// # Ok(()) }
    /// ```
    pub fn with_sized(mut self, keys: &[NestedKey]) -> Schema {
        for field in &mut self.fields {
            if field.can_be_sized() && keys.contains(&field.key) {
                field.sized = true;
            }
        }
        self
    }

    /// The schema that every env's template shares: identical batch sizes,
    /// keys, shapes and dtypes (and sub-dict batch sizes). An error names
    /// the env and the first key, in key order, that differs from env 0.
    ///
    /// ```
    /// use exchange::Schema;
    /// use tensordict::{DType, Tensor, TensorDict};
    /// # fn main() -> Result<(), tensordict::TensorDictError> {
    /// let env = |n: usize| -> Result<TensorDict, tensordict::TensorDictError> {
    ///     let mut td = TensorDict::new(&[]);
    ///     td.set(("next", "observation"), Tensor::zeros(DType::F32, &[n]))?;
    ///     Ok(td)
    /// };
    /// let err = Schema::validate_envs(&[env(4)?, env(4)?, env(4)?, env(3)?]).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     r#"env 3: key ("next", "observation") has shape [3] but env 0 has [4]"#
    /// );
    /// # Ok(()) }
    /// ```
    pub fn validate_envs(templates: &[TensorDict]) -> Result<Schema, SchemaError> {
        let (first, rest) = templates.split_first().ok_or(SchemaError::NoEnvs)?;
        let schema = Schema::from_template(first).map_err(|e| e.in_env(0))?;
        for (env, td) in rest.iter().enumerate().map(|(i, td)| (i + 1, td)) {
            if td.batch_size() != schema.batch_size.as_slice() {
                return Err(SchemaError::EnvBatchSize {
                    env,
                    batch_size: td.batch_size().to_vec(),
                    expected: schema.batch_size.to_vec(),
                });
            }
            let other = Schema::from_template(td).map_err(|e| e.in_env(env))?;
            schema.compare_env(&other, env)?;
        }
        Ok(schema)
    }

    /// The first difference between env 0's schema (`self`) and `env`'s:
    /// tensors first, then sub-dicts (an empty one, or a batch size).
    fn compare_env(&self, other: &Schema, env: usize) -> Result<(), SchemaError> {
        first_difference(
            env,
            &self.fields,
            &other.fields,
            |f| &f.key,
            |a, b| {
                if a.shape != b.shape {
                    return Err(SchemaError::EnvShape {
                        env,
                        key: b.key.clone(),
                        shape: b.shape.to_vec(),
                        expected: a.shape.to_vec(),
                    });
                }
                if a.dtype != b.dtype {
                    return Err(SchemaError::EnvDType {
                        env,
                        key: b.key.clone(),
                        dtype: b.dtype,
                        expected: a.dtype,
                    });
                }
                Ok(())
            },
        )?;
        first_difference(
            env,
            &self.dicts,
            &other.dicts,
            |(k, _)| k,
            |(key, a), (_, b)| {
                if a != b {
                    return Err(SchemaError::EnvSubDictBatchSize {
                        env,
                        key: key.clone(),
                        batch_size: b.to_vec(),
                        expected: a.to_vec(),
                    });
                }
                Ok(())
            },
        )
    }

    /// Validates and sorts the parts of a schema. `dicts` may leave out the
    /// sub-dicts that the keys imply; they get their parent's batch size.
    fn from_parts(
        batch_size: &[usize],
        mut fields: Vec<Field>,
        dicts: Vec<(NestedKey, Shape)>,
    ) -> Result<Schema, SchemaError> {
        let mut all_dicts: BTreeMap<NestedKey, Shape> = BTreeMap::new();
        for (key, batch) in dicts {
            if !key.is_valid() {
                return Err(SchemaError::InvalidKey { key });
            }
            if all_dicts.insert(key.clone(), batch).is_some() {
                return Err(SchemaError::DuplicateKey { key });
            }
        }
        fields.sort_by(|a, b| a.key.cmp(&b.key));
        if let Some(pair) = fields.windows(2).find(|w| w[0].key == w[1].key) {
            return Err(SchemaError::DuplicateKey {
                key: pair[0].key.clone(),
            });
        }
        // The sub-dicts on every path, parents first (shorter prefixes).
        let keys: Vec<NestedKey> = fields
            .iter()
            .map(|f| f.key.clone())
            .chain(all_dicts.keys().cloned())
            .collect();
        for key in &keys {
            for depth in 1..key.len() {
                let prefix = NestedKey::new(key.parts()[..depth].iter().map(String::as_str));
                if !all_dicts.contains_key(&prefix) {
                    let parent = Shape::from(Schema::parent_batch(&all_dicts, batch_size, &prefix));
                    all_dicts.insert(prefix, parent);
                }
            }
        }
        for field in &fields {
            if all_dicts.contains_key(&field.key) {
                return Err(SchemaError::KeyConflict {
                    key: field.key.clone(),
                });
            }
        }
        for (key, batch) in &all_dicts {
            let parent = Schema::parent_batch(&all_dicts, batch_size, key);
            if !batch.starts_with(parent) {
                return Err(SchemaError::LeadingDims {
                    key: key.clone(),
                    shape: batch.to_vec(),
                    batch_size: parent.to_vec(),
                });
            }
        }
        for field in &fields {
            let parent = Schema::parent_batch(&all_dicts, batch_size, &field.key);
            if !field.shape.starts_with(parent) {
                return Err(SchemaError::LeadingDims {
                    key: field.key.clone(),
                    shape: field.shape.to_vec(),
                    batch_size: parent.to_vec(),
                });
            }
        }
        let nbytes = fields
            .iter()
            .try_fold(0usize, |acc, f| acc.checked_add(f.nbytes))
            .ok_or(SchemaError::SchemaTooLarge {
                fields: fields.len(),
            })?;
        Ok(Schema {
            batch_size: batch_size.into(),
            fields,
            dicts: all_dicts.into_iter().collect(),
            nbytes,
        })
    }

    /// The batch size of the tensordict that holds `key`: its parent
    /// sub-dict's, or the root's.
    fn parent_batch<'a>(
        dicts: &'a BTreeMap<NestedKey, Shape>,
        root: &'a [usize],
        key: &NestedKey,
    ) -> &'a [usize] {
        match key.parts() {
            [] | [_] => root,
            parts => {
                let parent = NestedKey::new(parts[..parts.len() - 1].iter().map(String::as_str));
                dicts.get(&parent).map_or(root, |b| b.as_slice())
            }
        }
    }

    /// The fields, sorted by key.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The field at `key`, if any (a binary search; no allocation for keys
    /// of up to four parts).
    pub fn field(&self, key: impl KeyLike) -> Option<&Field> {
        self.position(key).map(|i| &self.fields[i])
    }

    /// The index in [`Schema::fields`] of the field at `key`, if any.
    pub fn position(&self, key: impl KeyLike) -> Option<usize> {
        let parts = key.key_parts();
        self.fields
            .binary_search_by(|f| cmp_parts(f.key.parts(), &parts))
            .ok()
    }

    /// The keys of the fields, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &NestedKey> + '_ {
        self.fields.iter().map(|f| &f.key)
    }

    /// Every sub-dict with its batch size, parents before children.
    pub fn sub_dicts(&self) -> impl ExactSizeIterator<Item = (&NestedKey, &[usize])> + '_ {
        self.dicts.iter().map(|(k, b)| (k, b.as_slice()))
    }

    /// The batch size of the tensordict the schema describes.
    pub fn batch_size(&self) -> &[usize] {
        &self.batch_size
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True if there is no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Sum of the fields' sizes in bytes (without the padding a layout
    /// adds).
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// A tensordict of zeros with this schema: its sub-dicts with their
    /// batch sizes, a zero tensor for each field. It gives back the schema:
    /// `Schema::from_template(&schema.zeros())` equals `schema`.
    ///
    /// Every field is allocated: a schema built with [`Schema::new`] or
    /// decoded may describe more bytes than memory holds, and allocating
    /// them aborts, as any allocation too large does.
    pub fn zeros(&self) -> TensorDict {
        let mut td = TensorDict::new(&self.batch_size);
        // Parents come before children, so each sub-dict's parent exists
        // with its own batch size when the sub-dict is set.
        for (key, batch) in &self.dicts {
            td.set(key, TensorDict::new(batch))
                .expect("a schema's sub-dicts start with their parent's batch size");
        }
        for field in &self.fields {
            td.set(&field.key, Tensor::zeros(field.dtype, &field.shape))
                .expect("a schema's fields start with their sub-dict's batch size");
        }
        td
    }

    /// Checks that `td` fits the schema before it is written to a slot:
    /// same batch size, no key that the schema lacks, every key of the
    /// schema, each with its dtype and shape. Sub-dicts' batch sizes are not
    /// compared (only tensor bytes travel; a reader gets them from the
    /// schema).
    ///
    /// When several things are wrong, the error is the first of: the batch
    /// size; the keys the schema lacks (all of them: such data travels
    /// through the queue exchange); the keys missing (all of them); the
    /// first key, in order, whose dtype or shape differs. Bookkeeping
    /// entries such as a pool's `env_index` are not in a schema: remove them
    /// first.
    ///
    /// Allocates nothing when `td` fits (keys of up to four parts).
    pub fn check(&self, td: &TensorDict) -> Result<(), SchemaError> {
        if td.batch_size() != self.batch_size.as_slice() {
            return Err(SchemaError::BatchSize {
                batch_size: td.batch_size().to_vec(),
                expected: self.batch_size.to_vec(),
            });
        }
        let mut missing = Vec::new();
        let mut mismatch = None;
        for field in &self.fields {
            let problem = match td.get(&field.key) {
                None | Some(Entry::Dict(_)) => {
                    missing.push(field.key.clone());
                    continue;
                }
                Some(Entry::Tensor(t)) if t.shape() != field.shape.as_slice() => {
                    SchemaError::Shape {
                        key: field.key.clone(),
                        shape: t.shape().to_vec(),
                        expected: field.shape.to_vec(),
                    }
                }
                Some(Entry::Tensor(t)) if t.dtype() != field.dtype => SchemaError::DType {
                    key: field.key.clone(),
                    dtype: t.dtype(),
                    expected: field.dtype,
                },
                Some(Entry::Tensor(_)) => continue,
                Some(Entry::NonTensor(_)) => SchemaError::NonTensorLeaf {
                    key: field.key.clone(),
                    kind: "non-tensor value",
                    env: None,
                },
            };
            mismatch.get_or_insert(problem);
        }
        // Every leaf found above is one of `td`'s leaves; any other leaf is a
        // key the schema lacks.
        let found = self.fields.len() - missing.len();
        if count_leaves(td) > found {
            let keys = td
                .keys(true, true)
                .into_iter()
                .filter(|key| self.position(key).is_none())
                .collect();
            return Err(SchemaError::UnknownKeys { keys });
        }
        if !missing.is_empty() {
            return Err(SchemaError::MissingKeys { keys: missing });
        }
        mismatch.map_or(Ok(()), Err)
    }

    /// The schema as bytes, for [`Schema::decode`] in another process.
    ///
    /// The format (integers little-endian):
    ///
    /// ```text
    /// schema := MAGIC "RLSC" | VERSION u8 | shape (batch size)
    ///           | count u32 | (key | shape) * count               sub-dicts, sorted
    ///           | count u32 | (key | dtype u8 | shape) * count    fields, sorted
    /// key    := nparts u32 | (len u32 | utf-8 bytes) * nparts
    /// shape  := ndim u32 | dim u64 * ndim
    /// ```
    ///
    /// The dtype byte is [`DType::tag`]; the flags byte is 1 for a
    /// length-prefixed field ([`Field::is_sized`]), else 0.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        write_shape(&mut out, &self.batch_size);
        write_len(&mut out, self.dicts.len());
        for (key, batch) in &self.dicts {
            write_key(&mut out, key);
            write_shape(&mut out, batch);
        }
        write_len(&mut out, self.fields.len());
        for field in &self.fields {
            write_key(&mut out, &field.key);
            out.push(field.dtype.tag());
            out.push(u8::from(field.sized));
            write_shape(&mut out, &field.shape);
        }
        out
    }

    /// A schema from bytes written by [`Schema::encode`].
    ///
    /// Never panics. Every count is checked against the bytes that remain
    /// before anything is allocated for it, a key has at most 64 parts, and
    /// the schema is validated as [`Schema::new`] validates one (keys,
    /// batch sizes, sizes).
    pub fn decode(bytes: &[u8]) -> Result<Schema, SchemaDecodeError> {
        let mut reader = ByteReader::new(bytes);
        if reader.take(MAGIC.len(), "magic").map_err(decode_error)? != MAGIC {
            return Err(SchemaDecodeError::BadMagic);
        }
        let version = reader.u8("version").map_err(decode_error)?;
        if version != VERSION {
            return Err(SchemaDecodeError::UnsupportedVersion {
                found: version,
                expected: VERSION,
            });
        }
        let batch_size = read_shape(&mut reader, "batch size")?;
        // Smallest sub-dict: nparts (4) + ndim (4).
        let count = reader
            .count::<u32>("sub-dict count", 8)
            .map_err(decode_error)?;
        let mut dicts = Vec::with_capacity(count);
        for _ in 0..count {
            let key = read_key(&mut reader)?;
            dicts.push((key, read_shape(&mut reader, "sub-dict batch size")?));
        }
        // Smallest field: nparts (4) + dtype (1) + flags (1) + ndim (4).
        let count = reader
            .count::<u32>("field count", 10)
            .map_err(decode_error)?;
        let mut fields = Vec::with_capacity(count);
        for _ in 0..count {
            let key = read_key(&mut reader)?;
            let at = reader.position();
            let tag = reader.u8("dtype").map_err(decode_error)?;
            let dtype = DType::from_tag(tag).ok_or(SchemaDecodeError::UnknownDType { tag, at })?;
            let at = reader.position();
            let flags = reader.u8("field flags").map_err(decode_error)?;
            let shape = read_shape(&mut reader, "shape")?;
            let mut field = Field::new(key, dtype, &shape)?;
            match flags {
                0 => {}
                1 if field.can_be_sized() => field.sized = true,
                _ => return Err(SchemaDecodeError::FieldFlags { flags, at }),
            }
            fields.push(field);
        }
        reader.finish("the schema").map_err(decode_error)?;
        Ok(Schema::from_parts(&batch_size, fields, dicts)?)
    }
}

/// Walks two lists sorted by key (env 0's and `env`'s) side by side: a key
/// in one list only is an error naming it; `same` compares the entries of a
/// key both have.
fn first_difference<T>(
    env: usize,
    expected: &[T],
    found: &[T],
    key: impl Fn(&T) -> &NestedKey,
    mut same: impl FnMut(&T, &T) -> Result<(), SchemaError>,
) -> Result<(), SchemaError> {
    let missing = |x: &T| SchemaError::EnvMissingKey {
        env,
        key: key(x).clone(),
    };
    let extra = |y: &T| SchemaError::EnvExtraKey {
        env,
        key: key(y).clone(),
    };
    let (mut a, mut b) = (expected.iter(), found.iter());
    let (mut x, mut y) = (a.next(), b.next());
    loop {
        match (x, y) {
            (None, None) => return Ok(()),
            (Some(x), None) => return Err(missing(x)),
            (None, Some(y)) => return Err(extra(y)),
            (Some(xv), Some(yv)) => match key(xv).cmp(key(yv)) {
                Ordering::Less => return Err(missing(xv)),
                Ordering::Greater => return Err(extra(yv)),
                Ordering::Equal => {
                    same(xv, yv)?;
                    x = a.next();
                    y = b.next();
                }
            },
        }
    }
}

/// Number of tensor and non-tensor leaves, without allocating.
pub(crate) fn count_leaves(td: &TensorDict) -> usize {
    td.iter()
        .map(|(_, entry)| match entry {
            Entry::Dict(d) => count_leaves(d),
            _ => 1,
        })
        .sum()
}

/// ```text
/// Schema(batch_size=[], 2 fields, 20 bytes)
///     "observation": f32[4]
///     ("next", "reward"): f32[1]
/// ```
///
/// Sub-dicts whose batch size is not their parent's get a line of their own.
impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.fields.len() == 1 { "" } else { "s" };
        write!(
            f,
            "Schema(batch_size={:?}, {} field{plural}, {} bytes)",
            self.batch_size.as_slice(),
            self.fields.len(),
            self.nbytes
        )?;
        let map: BTreeMap<NestedKey, Shape> = self.dicts.iter().cloned().collect();
        for (key, batch) in &self.dicts {
            if Schema::parent_batch(&map, &self.batch_size, key) != batch.as_slice() {
                write!(f, "\n    {key}: batch_size={:?}", batch.as_slice())?;
            }
        }
        for field in &self.fields {
            write!(f, "\n    {field}")?;
        }
        Ok(())
    }
}

/// The first bytes of an encoded schema.
const MAGIC: &[u8; 4] = b"RLSC";
/// The format version; a decoder refuses any other.
const VERSION: u8 = 2;
/// Most parts a decoded key may have (as deep as the tensordict codec
/// nests): validating a key costs time in the square of its parts.
const MAX_KEY_PARTS: usize = 64;

fn write_len(out: &mut Vec<u8>, len: usize) {
    // Counts, key parts and ranks above u32::MAX do not occur: a tensordict
    // that large does not fit in memory.
    let len = u32::try_from(len).expect("length fits in u32");
    out.extend_from_slice(&len.to_le_bytes());
}

fn write_shape(out: &mut Vec<u8>, shape: &[usize]) {
    write_len(out, shape.len());
    for &d in shape {
        out.extend_from_slice(&(d as u64).to_le_bytes());
    }
}

fn write_key(out: &mut Vec<u8>, key: &NestedKey) {
    write_len(out, key.len());
    for part in key.parts() {
        write_len(out, part.len());
        out.extend_from_slice(part.as_bytes());
    }
}

/// [`Schema::decode`]'s error for a failed read: a count that cannot fit
/// in the bytes that remain is a truncation (its items would need more
/// bytes than remain), as is a read past the end.
fn decode_error(err: ReadError) -> SchemaDecodeError {
    match err {
        ReadError::Truncated {
            what,
            at,
            needed,
            remaining,
        } => SchemaDecodeError::Truncated {
            what,
            at,
            needed,
            remaining,
        },
        ReadError::CountTooLarge {
            what,
            at,
            remaining,
            ..
        } => SchemaDecodeError::Truncated {
            what,
            at,
            needed: err.needed().unwrap_or(usize::MAX),
            remaining,
        },
        // Counts are `u32`s: only a dim (a `u64`) can be too large.
        ReadError::TooLarge { value, at, .. } => SchemaDecodeError::DimTooLarge { dim: value, at },
        ReadError::InvalidUtf8 { at, .. } => SchemaDecodeError::InvalidUtf8 { at },
        ReadError::TrailingBytes { count, .. } => SchemaDecodeError::TrailingBytes { count },
    }
}

/// A shape: its `u32` rank, then each dim, a `u64` that must fit `usize`.
fn read_shape(reader: &mut ByteReader<'_>, what: &'static str) -> Result<Shape, SchemaDecodeError> {
    let ndim = reader.count::<u32>(what, 8).map_err(decode_error)?;
    let mut shape = Shape::with_capacity(ndim);
    for _ in 0..ndim {
        shape.push(reader.u64_usize(what).map_err(decode_error)?);
    }
    Ok(shape)
}

/// A key: its `u32` number of parts (at most [`MAX_KEY_PARTS`]), then each
/// part, a `u32`-length-prefixed UTF-8 string.
fn read_key(reader: &mut ByteReader<'_>) -> Result<NestedKey, SchemaDecodeError> {
    let at = reader.position();
    // Smallest part: its length (4).
    let nparts = reader.count::<u32>("key", 4).map_err(decode_error)?;
    if nparts > MAX_KEY_PARTS {
        return Err(SchemaDecodeError::KeyTooDeep {
            parts: nparts,
            max: MAX_KEY_PARTS,
            at,
        });
    }
    let mut parts = Vec::with_capacity(nparts);
    for _ in 0..nparts {
        let part = reader.str::<u32>("key part").map_err(decode_error)?;
        parts.push(part.to_owned());
    }
    Ok(NestedKey::from(parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_compare_as_nested_keys_do() {
        let keys = [
            NestedKey::from("a"),
            NestedKey::from(("a", "b")),
            NestedKey::from(("a", "b", "c")),
            NestedKey::from("a0"),
            NestedKey::from(("b", "a")),
        ];
        for x in &keys {
            for y in &keys {
                let parts: Vec<&str> = y.parts().iter().map(String::as_str).collect();
                assert_eq!(cmp_parts(x.parts(), &parts), x.cmp(y), "{x} vs {y}");
            }
        }
    }

    #[test]
    fn implied_sub_dicts_take_their_parents_batch_size() {
        let schema = Schema::new(
            &[2],
            vec![Field::new(("a", "b", "c"), DType::U8, &[2, 3]).unwrap()],
        )
        .unwrap();
        let dicts: Vec<_> = schema
            .sub_dicts()
            .map(|(k, b)| (k.to_string(), b.to_vec()))
            .collect();
        assert_eq!(
            dicts,
            [
                (r#""a""#.to_owned(), vec![2]),
                (r#"("a", "b")"#.to_owned(), vec![2])
            ]
        );
    }

    #[test]
    fn counting_leaves_counts_non_tensors_and_skips_empty_sub_dicts() {
        let mut td = TensorDict::new(&[]);
        td.set("x", Tensor::scalar(1u8)).unwrap();
        td.set(("n", "y"), tensordict::NonTensor::from("s"))
            .unwrap();
        td.set("empty", TensorDict::new(&[])).unwrap();
        assert_eq!(count_leaves(&td), 2);
    }
}
