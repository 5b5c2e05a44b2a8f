//! Proptest strategies shared by the integration tests: arbitrary tensors and
//! tensordicts, and tensordicts of a given structure with fresh values.

// Each test crate uses a subset of these strategies.
#![allow(dead_code)]

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::strategy::Union;
use tensordict::{DType, Entry, NonTensor, Tensor, TensorDict};

/// Up to `max_len` dims, each of size 0..4.
pub(crate) fn dims(max_len: usize) -> impl Strategy<Value = Vec<usize>> + Clone {
    vec(0..4usize, 0..=max_len)
}

/// A batch size: up to two dims of size 0..4.
pub(crate) fn batch_size() -> impl Strategy<Value = Vec<usize>> + Clone {
    dims(2)
}

/// Any dtype.
pub(crate) fn dtype() -> impl Strategy<Value = DType> + Clone {
    prop::sample::select(DType::ALL.to_vec())
}

/// A tensor of this dtype and shape with random bytes (any bit pattern,
/// NaNs included, for floats; 0 or 1 for bools).
pub(crate) fn tensor_of(dtype: DType, shape: Vec<usize>) -> BoxedStrategy<Tensor> {
    let nbytes = shape.iter().product::<usize>() * dtype.size();
    vec(any::<u8>(), nbytes)
        .prop_map(move |mut bytes| {
            if dtype == DType::Bool {
                bytes.iter_mut().for_each(|b| *b &= 1);
            }
            Tensor::from_bytes(dtype, &shape, &bytes).expect("bytes fill the shape")
        })
        .boxed()
}

/// A tensor of any dtype whose shape is `batch` followed by up to two dims.
pub(crate) fn tensor(batch: &[usize]) -> BoxedStrategy<Tensor> {
    let batch = batch.to_vec();
    (dtype(), dims(2))
        .prop_flat_map(move |(dtype, extra)| {
            let shape = batch.iter().chain(&extra).copied().collect();
            tensor_of(dtype, shape)
        })
        .boxed()
}

/// A float that is not NaN: `NonTensor::Float` compares with `f64 ==`.
pub(crate) fn float_not_nan() -> impl Strategy<Value = f64> + Clone {
    use prop::num::f64;
    f64::POSITIVE | f64::NEGATIVE | f64::NORMAL | f64::SUBNORMAL | f64::ZERO | f64::INFINITE
}

/// One non-tensor value that is not a stack (strings may be any unicode).
pub(crate) fn scalar() -> BoxedStrategy<NonTensor> {
    prop_oneof![
        any::<i64>().prop_map(NonTensor::Int),
        float_not_nan().prop_map(NonTensor::Float),
        any::<bool>().prop_map(NonTensor::Bool),
        "(?s).{0,6}".prop_map(NonTensor::Str),
    ]
    .boxed()
}

/// True if a non-tensor stack can have this batch size: `NonTensor::shape`
/// cannot see past a dimension of size 0, so only the last dim may be 0.
pub(crate) fn non_tensor_fits(batch: &[usize]) -> bool {
    batch.iter().rev().skip(1).all(|&d| d != 0)
}

/// A non-tensor value whose shape starts with `batch`: nested stacks, one
/// level per batch dim, of scalars (or, with at most one batch dim, short
/// lists, which may be ragged).
pub(crate) fn non_tensor(batch: &[usize]) -> BoxedStrategy<NonTensor> {
    fn inner(batch: &[usize], lists: bool) -> BoxedStrategy<NonTensor> {
        match batch.split_first() {
            None if lists => prop_oneof![
                3 => scalar(),
                1 => vec(scalar(), 0..3).prop_map(NonTensor::from),
            ]
            .boxed(),
            None => scalar(),
            Some((&n, rest)) => vec(inner(rest, lists), n).prop_map(NonTensor::from).boxed(),
        }
    }
    // With two batch dims, ragged lists would make the rows' shapes differ
    // and hide the second batch dim from `NonTensor::shape`.
    inner(batch, batch.len() <= 1)
}

/// A short key part; mostly ascii, sometimes not.
pub(crate) fn key_part() -> impl Strategy<Value = String> + Clone {
    "[a-e]{1,2}|[a-zé_ω]{1,3}"
}

fn entry(batch: Vec<usize>, depth: u32) -> BoxedStrategy<Entry> {
    let mut options = vec![(3, tensor(&batch).prop_map(Entry::Tensor).boxed())];
    if non_tensor_fits(&batch) {
        options.push((1, non_tensor(&batch).prop_map(Entry::NonTensor).boxed()));
    }
    if depth > 0 {
        // A sub-dict's batch size may extend its parent's.
        let extra = if batch.len() < 2 {
            prop_oneof![3 => Just(vec![]), 1 => vec(0..3usize, 1)].boxed()
        } else {
            Just(vec![]).boxed()
        };
        let sub = extra
            .prop_flat_map(move |extra| {
                let sub_batch = batch.iter().chain(&extra).copied().collect();
                dict(sub_batch, depth - 1)
            })
            .prop_map(Entry::Dict)
            .boxed();
        options.push((1, sub));
    }
    Union::new_weighted(options).boxed()
}

/// A tensordict of this batch size with up to three entries per level and
/// sub-dicts nested `depth` more levels.
pub(crate) fn dict(batch: Vec<usize>, depth: u32) -> BoxedStrategy<TensorDict> {
    btree_map(key_part(), entry(batch.clone(), depth), 0..4)
        .prop_map(move |entries| {
            let mut td = TensorDict::new(&batch);
            for (key, entry) in entries {
                td.set(key.as_str(), entry).expect("generated to fit");
            }
            td
        })
        .boxed()
}

/// Any tensordict: a random batch size and keys up to three parts deep.
pub(crate) fn tensordict() -> BoxedStrategy<TensorDict> {
    batch_size().prop_flat_map(|batch| dict(batch, 2)).boxed()
}

/// A tensordict with a non-empty first batch dim (so it can be unbound and
/// stacked back).
pub(crate) fn batched_tensordict() -> BoxedStrategy<TensorDict> {
    (1..4usize, dims(1))
        .prop_flat_map(|(first, rest)| {
            let batch = std::iter::once(first).chain(rest).collect();
            dict(batch, 2)
        })
        .boxed()
}

/// A non-tensor value with the same stack structure as `like` and fresh
/// scalars (of any kind).
pub(crate) fn same_values(like: &NonTensor) -> BoxedStrategy<NonTensor> {
    match like {
        NonTensor::Stack(items) => items
            .iter()
            .map(same_values)
            .collect::<Vec<_>>()
            .prop_map(NonTensor::from)
            .boxed(),
        _ => scalar(),
    }
}

/// A tensordict with the keys, kinds, shapes and dtypes of `like` and fresh
/// values.
pub(crate) fn same_structure(like: &TensorDict) -> BoxedStrategy<TensorDict> {
    let batch = like.batch_size().to_vec();
    let (names, values): (Vec<String>, Vec<BoxedStrategy<Entry>>) = like
        .iter()
        .map(|(name, entry)| {
            let value = match entry {
                Entry::Tensor(t) => tensor_of(t.dtype(), t.shape().to_vec())
                    .prop_map(Entry::Tensor)
                    .boxed(),
                Entry::NonTensor(v) => same_values(v).prop_map(Entry::NonTensor).boxed(),
                Entry::Dict(d) => same_structure(d).prop_map(Entry::Dict).boxed(),
            };
            (name.to_owned(), value)
        })
        .unzip();
    values
        .prop_map(move |values| {
            let mut td = TensorDict::new(&batch);
            for (name, value) in names.iter().zip(values) {
                td.set(name.as_str(), value).expect("same structure fits");
            }
            td
        })
        .boxed()
}

/// One to four tensordicts of one random structure with independent values.
pub(crate) fn homogeneous_parts() -> BoxedStrategy<Vec<TensorDict>> {
    tensordict()
        .prop_flat_map(|like| vec(same_structure(&like), 1..5))
        .boxed()
}
