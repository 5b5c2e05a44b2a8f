//! Properties of stacking: dense stack and unbind invert each other (without
//! copying), lazy and maybe-dense stacks agree with the dense one, and
//! tensors copy on write.

mod common;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use tensordict::{
    decode, encode, DType, Entry, NonTensor, StackedTensorDict, Tensor, TensorDict, TensorDictError,
};

/// One to four tensordicts of one batch size, some of one structure (so
/// that keys are shared and often agree) and some arbitrary.
fn heterogeneous_parts() -> BoxedStrategy<Vec<TensorDict>> {
    common::batch_size()
        .prop_flat_map(|batch| common::dict(batch, 1))
        .prop_flat_map(|like| {
            let any = common::dict(like.batch_size().to_vec(), 1);
            vec(prop_oneof![common::same_structure(&like), any], 1..5)
        })
        .boxed()
}

/// A tensor with at least one element.
fn non_empty_tensor() -> BoxedStrategy<Tensor> {
    (common::dtype(), vec(1..4usize, 0..=3))
        .prop_flat_map(|(dtype, shape)| common::tensor_of(dtype, shape))
        .boxed()
}

/// A tensor with at least one dim, the first non-empty.
fn unbindable_tensor() -> BoxedStrategy<Tensor> {
    (common::dtype(), 1..5usize, common::dims(2))
        .prop_flat_map(|(dtype, first, rest)| {
            common::tensor_of(dtype, std::iter::once(first).chain(rest).collect())
        })
        .boxed()
}

proptest! {
    #[test]
    fn stack_then_unbind_gives_the_parts(parts in common::homogeneous_parts()) {
        let stacked = TensorDict::stack(&parts).unwrap();
        let mut batch = vec![parts.len()];
        batch.extend_from_slice(parts[0].batch_size());
        prop_assert_eq!(stacked.batch_size(), &batch[..]);
        prop_assert_eq!(stacked.unbind().unwrap(), parts.clone());
        for (i, part) in parts.iter().enumerate() {
            prop_assert_eq!(&stacked.index(i).unwrap(), part);
        }
        prop_assert!(stacked.index(parts.len()).is_err());
        // The stack is a valid tensordict: it survives the codec.
        prop_assert_eq!(decode(&encode(&stacked)), Ok(stacked));
    }

    #[test]
    fn unbind_then_stack_gives_the_tensordict_without_copying(
        td in common::batched_tensordict(),
    ) {
        let rows = td.unbind().unwrap();
        prop_assert_eq!(rows.len(), td.batch_size()[0]);
        let restacked = TensorDict::stack(&rows).unwrap();
        prop_assert_eq!(&restacked, &td);
        for (key, entry) in td.items(true, true) {
            if let Entry::Tensor(t) = entry {
                let again = restacked.tensor(&key).unwrap();
                prop_assert!(again.shares_storage(t), "{} was copied", key);
                for row in &rows {
                    prop_assert!(row.tensor(&key).unwrap().shares_storage(t));
                }
            }
        }
    }

    #[test]
    fn lazy_stack_indexes_parts_and_stacks_agreeing_keys(parts in heterogeneous_parts()) {
        let lazy = TensorDict::lazy_stack(parts.clone()).unwrap();
        prop_assert_eq!(lazy.len(), parts.len());
        let mut batch = vec![parts.len()];
        batch.extend_from_slice(parts[0].batch_size());
        prop_assert_eq!(lazy.batch_size(), batch);
        for (i, part) in parts.iter().enumerate() {
            prop_assert_eq!(lazy.index(i).unwrap(), part);
        }
        prop_assert!(lazy.index(parts.len()).is_err());

        let mut keys = parts[0].keys(true, true);
        keys.extend(parts.iter().flat_map(|p| p.keys(true, true)));
        for key in keys {
            let tensors: Result<Vec<Tensor>, _> =
                parts.iter().map(|p| p.tensor(&key).cloned()).collect();
            let agree = tensors.as_ref().is_ok_and(|ts| {
                ts.iter().all(|t| t.dtype() == ts[0].dtype() && t.shape() == ts[0].shape())
            });
            match lazy.get_tensor(&key) {
                Ok(stacked) => {
                    prop_assert!(agree, "{} stacked but the parts disagree", key);
                    prop_assert_eq!(stacked, Tensor::stack(&tensors.unwrap()).unwrap());
                }
                Err(err) => {
                    prop_assert!(!agree, "{} not stacked: {}", key, err);
                    let is_lazy_key = matches!(err, TensorDictError::LazyKey { .. });
                    prop_assert!(is_lazy_key, "{}", err);
                }
            }
            prop_assert_eq!(lazy.contains(&key), parts.iter().all(|p| p.contains(&key)));
        }
        prop_assert_eq!(lazy.to_dense(), TensorDict::stack(&parts));
    }

    #[test]
    fn maybe_dense_stack_is_dense_iff_stack_succeeds(parts in heterogeneous_parts()) {
        let dense = TensorDict::stack(&parts);
        let maybe = TensorDict::maybe_dense_stack(parts.clone()).unwrap();
        match (&dense, &maybe) {
            (Ok(dense), StackedTensorDict::Dense(maybe)) => prop_assert_eq!(dense, maybe),
            (Err(_), StackedTensorDict::Lazy(lazy)) => prop_assert_eq!(lazy.parts(), &parts[..]),
            _ => prop_assert!(false, "stack gave {:?} but maybe_dense_stack {:?}", dense, maybe),
        }
        prop_assert_eq!(maybe.len(), parts.len());
        prop_assert_eq!(maybe.unbind().unwrap(), parts.clone());
        for (i, part) in parts.iter().enumerate() {
            prop_assert_eq!(&maybe.index(i).unwrap(), part);
        }
    }

    #[test]
    fn homogeneous_parts_always_stack_densely(parts in common::homogeneous_parts()) {
        let maybe = TensorDict::maybe_dense_stack(parts).unwrap();
        prop_assert!(maybe.is_dense());
    }

    #[test]
    fn writing_a_clone_leaves_the_original_unchanged(
        tensor in non_empty_tensor(),
        at in any::<Index>(),
    ) {
        let before = tensor.as_bytes().to_vec();
        let mut clone = tensor.clone();
        prop_assert!(clone.shares_storage(&tensor));
        let byte = at.index(tensor.numel()) * tensor.dtype().size();
        let flip = if tensor.dtype() == DType::Bool { 1 } else { 0xff };
        clone.bytes_mut()[byte] ^= flip;
        prop_assert!(!clone.shares_storage(&tensor));
        prop_assert_eq!(tensor.as_bytes(), &before[..]);
        let mut expected = before;
        expected[byte] ^= flip;
        prop_assert_eq!(clone.as_bytes(), &expected[..]);
    }

    #[test]
    fn writing_a_row_leaves_the_tensor_and_other_rows_unchanged(
        tensor in unbindable_tensor(),
        row in any::<Index>(),
    ) {
        let before = tensor.clone();
        let before_bytes = tensor.as_bytes().to_vec();
        let mut rows = tensor.unbind().unwrap();
        let row = row.index(rows.len());
        let others: Vec<Vec<u8>> = rows.iter().map(|r| r.as_bytes().to_vec()).collect();
        if rows[row].numel() > 0 {
            let flip = if tensor.dtype() == DType::Bool { 1 } else { 0xff };
            rows[row].bytes_mut()[0] ^= flip;
        }
        prop_assert_eq!(tensor.as_bytes(), &before_bytes[..]);
        prop_assert_eq!(&tensor, &before);
        for (i, r) in rows.iter().enumerate().filter(|&(i, _)| i != row) {
            prop_assert_eq!(r.as_bytes(), &others[i][..]);
        }
    }

    #[test]
    fn tensor_stack_of_unbind_is_the_tensor_without_copying(tensor in unbindable_tensor()) {
        let rows = tensor.unbind().unwrap();
        prop_assert_eq!(rows.len(), tensor.shape()[0]);
        let again = Tensor::stack(&rows).unwrap();
        prop_assert!(again.shares_storage(&tensor));
        prop_assert_eq!(again, tensor);
    }

    #[test]
    fn tensor_stack_of_rows_in_any_order_concatenates(
        tensor in unbindable_tensor(),
        order in vec(any::<Index>(), 1..6),
    ) {
        let rows = tensor.unbind().unwrap();
        let picked: Vec<Tensor> = order.iter().map(|i| rows[i.index(rows.len())].clone()).collect();
        let stacked = Tensor::stack(&picked).unwrap();
        let mut shape = vec![picked.len()];
        shape.extend_from_slice(&tensor.shape()[1..]);
        prop_assert_eq!(stacked.shape(), &shape[..]);
        let bytes: Vec<u8> = picked.iter().flat_map(|r| r.as_bytes().to_vec()).collect();
        prop_assert_eq!(stacked.as_bytes(), &bytes[..]);
        prop_assert_eq!(stacked.unbind().unwrap(), picked);
    }
}

fn step(obs: [f32; 2], env_index: i64) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set("observation", Tensor::from_vec(&[2], obs.to_vec()).unwrap())
        .unwrap();
    td.set(
        ("next", "done"),
        Tensor::from_vec(&[1], vec![false]).unwrap(),
    )
    .unwrap();
    td.set("env_index", NonTensor::Int(env_index)).unwrap();
    td
}

#[test]
fn a_batch_of_steps_stacked_over_time_unbinds_to_the_steps() {
    // Steps of 3 envs, stacked into batches, then 2 batches stacked in time.
    let batches: Vec<TensorDict> = (0..2)
        .map(|t| {
            let steps: Vec<TensorDict> = (0..3).map(|e| step([t as f32, e as f32], e)).collect();
            TensorDict::stack(&steps).unwrap()
        })
        .collect();
    let rollout = TensorDict::stack(&batches).unwrap();
    assert_eq!(rollout.batch_size(), &[2, 3]);
    assert_eq!(rollout.tensor("observation").unwrap().shape(), &[2, 3, 2]);
    assert_eq!(
        rollout.tensor(("next", "done")).unwrap().shape(),
        &[2, 3, 1]
    );
    assert_eq!(
        rollout.non_tensor("env_index").unwrap().shape().as_slice(),
        &[2, 3]
    );
    let step_1_2 = rollout.index(1).unwrap().index(2).unwrap();
    assert_eq!(step_1_2, step([1.0, 2.0], 2));
    assert_eq!(rollout.unbind().unwrap(), batches);
}

#[test]
fn stacking_non_tensor_rows_of_different_shapes_keeps_the_batch_size() {
    // Each env reports a list of events. Steps of 2 envs are stacked into a
    // batch of size [2]; two such batches are stacked in time into [2, 2].
    let step = |events: &[i64]| {
        let mut td = TensorDict::new(&[]);
        td.set("events", NonTensor::from(events.to_vec())).unwrap();
        td
    };
    // At t = 0 the lists have one length ("events" has shape [2, 1]); at
    // t = 1 they do not (shape [2]). Both batches are valid.
    let t0 = TensorDict::stack(&[step(&[1]), step(&[2])]).unwrap();
    let t1 = TensorDict::stack(&[step(&[3, 4]), step(&[5])]).unwrap();
    // Either an error naming "events", or a valid tensordict of batch size
    // [2, 2]; not one that breaks its own batch-size invariant.
    if let Ok(rollout) = TensorDict::stack(&[t0, t1]) {
        assert_eq!(rollout.batch_size(), &[2, 2]);
        let events = rollout.non_tensor("events").unwrap();
        assert!(
            events.shape().starts_with(&[2, 2]),
            "events has shape {:?} in a tensordict of batch size [2, 2]",
            events.shape()
        );
        assert_eq!(decode(&encode(&rollout)), Ok(rollout));
    }
}

#[test]
fn stacking_clones_of_a_zero_sized_tensor_checks_the_size() {
    // [2^63, 0] holds no element and is valid; two of it side by side would
    // be [2, 2^63, 0], whose prefix product overflows usize.
    let empty = Tensor::zeros(DType::U8, &[1 << 63, 0]);
    assert_eq!(empty.numel(), 0);
    match Tensor::stack(&[empty.clone(), empty]) {
        Err(err) => assert!(matches!(err, TensorDictError::ShapeTooLarge { .. })),
        // A tensor was returned: it must be usable.
        Ok(stacked) => assert_eq!(stacked.numel(), 0),
    }
}
