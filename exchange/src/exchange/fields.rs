//! Tensordicts as the fields of a schema: which fields a tensordict has
//! (a keys-present mask), a field filled in place, and batches assembled
//! from field columns with the slot indices under `SLOT_KEY`.

use smallvec::SmallVec;
use tensordict::{Entry, KeyLike, NestedKey, NonTensor, Shape, Tensor, TensorDict};

use super::SLOT_KEY;
use crate::error::SchemaError;
use crate::schema::{count_leaves, Field, Schema};

/// One part of a buffer per field of a schema (on the stack up to 16
/// fields: a receive cuts a slot's areas this way for every result).
pub(super) type Parts<'a> = SmallVec<[&'a mut [u8]; 16]>;

/// `bytes` cut into one part per field of `schema`, in order.
pub(super) fn split_fields<'a>(schema: &Schema, mut bytes: &'a mut [u8]) -> Parts<'a> {
    let mut parts = Parts::with_capacity(schema.len());
    for field in schema.fields() {
        let (part, rest) = std::mem::take(&mut bytes).split_at_mut(field.nbytes());
        parts.push(part);
        bytes = rest;
    }
    parts
}

/// A mask with one bit for each of `n` fields (`n <= 64`).
pub(super) fn all_fields(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// `shape` with `rows` in front, when given.
pub(super) fn stacked(rows: Option<usize>, shape: &[usize]) -> Shape {
    let mut out = Shape::with_capacity(shape.len() + 1);
    out.extend(rows);
    out.extend_from_slice(shape);
    out
}

/// A zeroed tensor for each field of `schema`, `rows` of them stacked when
/// given.
pub(super) fn columns(schema: &Schema, rows: Option<usize>) -> Vec<Tensor> {
    schema
        .fields()
        .iter()
        .map(|field| Tensor::zeros(field.dtype(), &stacked(rows, field.shape())))
        .collect()
}

/// True if `key` lies inside the sub-dict `dict`.
pub(super) fn is_under(key: &NestedKey, dict: &NestedKey) -> bool {
    key.len() > dict.len() && key.parts().starts_with(dict.parts())
}

/// A tensordict of `schema` (stacked `rows` times, when given) holding the
/// `columns` of the fields set in `mask`, and the sub-dicts on their paths
/// (plus the schema's empty sub-dicts).
pub(super) fn assemble(
    schema: &Schema,
    rows: Option<usize>,
    columns: Vec<Tensor>,
    mask: u64,
) -> TensorDict {
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
pub(super) fn expand(value: NonTensor, dims: &[usize]) -> NonTensor {
    match dims.split_first() {
        None => value,
        Some((&n, rest)) => NonTensor::Stack(vec![expand(value, rest); n].into()),
    }
}

/// Sets the slot indices under [`SLOT_KEY`]: a stack over the rows when
/// `rows` is given, one value otherwise, expanded to the schema's batch
/// size `batch`.
pub(super) fn set_slots(
    td: &mut TensorDict,
    slots: &[usize],
    rows: Option<usize>,
    batch: &[usize],
) {
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
pub(super) fn fill_field(
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
pub(super) type Present<'a> = SmallVec<[&'a Tensor; 16]>;

/// The tensors of a tensordict to write into an area, checked against the
/// area's schema ([`fields_of`]).
pub(super) enum Fields<'a> {
    /// Every field, in the schema's order: `td`'s tensors, read straight
    /// from it (what a worker's buffer, made from the same template, holds
    /// on every publish).
    InOrder(&'a TensorDict),
    /// The fields of the mask, their tensors in order ([`present_fields`]).
    Present(u64, Present<'a>),
}

impl Fields<'_> {
    /// The keys-present mask, for a schema of `n` fields.
    pub(super) fn mask(&self, n: usize) -> u64 {
        match self {
            Fields::InOrder(_) => all_fields(n),
            Fields::Present(mask, _) => *mask,
        }
    }
}

/// The tensors of `td` to write into an area of `schema`: as
/// [`present_fields`] finds them (the same answers, the same errors), but
/// with neither a lookup nor a list when `td` holds every field in order.
#[inline]
pub(super) fn fields_of<'a>(
    schema: &Schema,
    td: &'a TensorDict,
) -> Result<Fields<'a>, SchemaError> {
    if td.batch_size() == schema.batch_size() && holds_every_field_in_order(schema, td) {
        return Ok(Fields::InOrder(td));
    }
    present_fields(schema, td).map(|(mask, present)| Fields::Present(mask, present))
}

/// The tensors of a tensordict that [`holds_every_field_in_order`], in
/// order.
pub(super) fn tensors_in_order(td: &TensorDict) -> impl Iterator<Item = &Tensor> {
    td.iter().filter_map(|(_, entry)| match entry {
        Entry::Tensor(t) => Some(t),
        _ => None,
    })
}

/// The keys-present mask of `td` for `schema`, and the tensors present (so
/// that a writer looks each key up once): `td` has the schema's batch size,
/// no key that the schema lacks, and the schema's dtype and shape at each
/// key it has; it may leave keys of the schema out.
///
/// When several things are wrong, the error is the first of: the batch
/// size; the keys the schema lacks (all of them); the first key, in order,
/// whose dtype or shape differs. Writers call [`fields_of`], which answers
/// a tensordict that holds every field in order without these lookups.
pub(super) fn present_fields<'a>(
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

/// Whether `td` (of the schema's batch size) is flat and holds exactly the
/// schema's fields, in the schema's order, each a tensor of the field's
/// dtype and shape: what a worker's result buffer, made from the same
/// template, holds on every publish. If not, the lookups of
/// [`present_fields`] decide, and name what is wrong.
fn holds_every_field_in_order(schema: &Schema, td: &TensorDict) -> bool {
    let fields = schema.fields();
    td.len() == fields.len()
        && fields.len() <= 64
        && td
            .iter()
            .zip(fields)
            .all(|((name, entry), field)| match entry {
                Entry::Tensor(t) => {
                    field.key().single().is_some_and(|key| same_name(key, name))
                        && t.dtype() == field.dtype()
                        && same(t.shape(), field.shape())
                }
                _ => false,
            })
}

/// `a == b`, compared in line: a shape is a few dimensions, for which the
/// call to `memcmp` that a slice comparison makes costs more than the
/// comparison.
#[inline]
fn same<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `a == b` for keys: one of 8 to 16 bytes (most names) is compared as its
/// first and its last 8 bytes, in line; any other through `memcmp`.
#[inline]
fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if !(8..=16).contains(&n) {
        return a == b;
    }
    let word = |s: &[u8], at: usize| {
        u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes of a key"))
    };
    word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::schema;
    use tensordict::DType;

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

    /// A flat tensordict with exactly the schema's fields, made from the
    /// same template, is read in one pass; anything else gets the lookups'
    /// answer (the same mask for a subset, the same errors).
    #[test]
    fn every_field_in_order_is_the_lookups_answer() {
        let mut template = TensorDict::new(&[]);
        template.set("b", Tensor::zeros(DType::F32, &[2])).unwrap();
        template.set("a", Tensor::zeros(DType::U8, &[1])).unwrap();
        let s = Schema::from_template(&template).unwrap();
        assert!(holds_every_field_in_order(&s, &template));
        assert!(matches!(fields_of(&s, &template), Ok(Fields::InOrder(_))));
        assert_eq!(tensors_in_order(&template).count(), 2);
        assert_eq!(present_fields(&s, &template).map(|(m, _)| m), Ok(0b11));
        // A field of another dtype or shape: no fast answer, the error.
        let mut other = template.clone();
        other.set("a", Tensor::zeros(DType::U8, &[2])).unwrap();
        assert!(!holds_every_field_in_order(&s, &other));
        assert!(matches!(
            present_fields(&s, &other),
            Err(SchemaError::Shape { .. })
        ));
        assert!(matches!(
            fields_of(&s, &other),
            Err(SchemaError::Shape { .. })
        ));
        // A subset, or an extra key: the lookups decide.
        let mut subset = TensorDict::new(&[]);
        subset.set("b", Tensor::zeros(DType::F32, &[2])).unwrap();
        assert!(!holds_every_field_in_order(&s, &subset));
        assert_eq!(present_fields(&s, &subset).map(|(m, _)| m), Ok(0b10));
        assert!(matches!(
            fields_of(&s, &subset),
            Ok(Fields::Present(0b10, _))
        ));
        let mut extra = template.clone();
        extra.set("c", Tensor::zeros(DType::U8, &[1])).unwrap();
        assert!(!holds_every_field_in_order(&s, &extra));
        assert!(matches!(
            present_fields(&s, &extra),
            Err(SchemaError::UnknownKeys { .. })
        ));
    }

    #[test]
    fn names_compare_equal_only_when_equal() {
        let names = [
            "",
            "a",
            "done",
            "reward!",
            "action__",
            "terminated",
            "observation",
            "observation_16b",
            "observation_16by",
            "observation_long_name",
        ];
        for a in names {
            for b in names {
                assert_eq!(same_name(a, b), a == b, "{a:?} {b:?}");
            }
            // The same length, one byte apart anywhere.
            for i in 0..a.len() {
                let mut other = a.as_bytes().to_vec();
                other[i] ^= 1;
                let other = String::from_utf8(other).unwrap();
                assert!(!same_name(a, &other), "{a:?} {other:?}");
            }
        }
    }

    #[test]
    fn slot_indices_expand_to_the_batch_size() {
        assert_eq!(
            expand(NonTensor::Int(3), &[2]),
            NonTensor::Stack(vec![NonTensor::Int(3), NonTensor::Int(3)].into())
        );
        let mut td = TensorDict::new(&[2, 2]);
        set_slots(&mut td, &[4, 7], Some(2), &[2]);
        assert_eq!(td.non_tensor(SLOT_KEY).unwrap().shape().as_slice(), &[2, 2]);
    }
}
