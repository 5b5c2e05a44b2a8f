//! The `Display` of tensordicts and lazy stacks, checked against exact
//! strings in the shape of TorchRL's repr.

use tensordict::{DType, NonTensor, Tensor, TensorDict};

/// A batch of two CartPole-like steps with an env index, a label, a
/// nested `next` dict and a sub-dict with a longer batch size.
fn batch() -> TensorDict {
    let mut td = TensorDict::new(&[2]);
    td.set("observation", Tensor::zeros(DType::F32, &[2, 4]))
        .unwrap();
    td.set("action", Tensor::zeros(DType::I64, &[2, 1]))
        .unwrap();
    td.set("env_index", NonTensor::from(vec![0i64, 1])).unwrap();
    td.set("label", NonTensor::from(vec!["left", "right"]))
        .unwrap();
    td.set(("next", "observation"), Tensor::zeros(DType::F32, &[2, 4]))
        .unwrap();
    td.set(("next", "reward"), Tensor::zeros(DType::F32, &[2, 1]))
        .unwrap();
    td.set(("next", "done"), Tensor::zeros(DType::Bool, &[2, 1]))
        .unwrap();
    td.set("frames", TensorDict::new(&[2, 3])).unwrap();
    td.set(
        ("frames", "pixels"),
        Tensor::zeros(DType::U8, &[2, 3, 84, 84]),
    )
    .unwrap();
    td
}

#[test]
fn a_nested_tensordict() {
    let expected = "\
TensorDict(
    fields={
        action: Tensor(shape=[2, 1], dtype=i64),
        env_index: NonTensorStack([0, 1], batch_size=[2]),
        frames: TensorDict(
            fields={
                pixels: Tensor(shape=[2, 3, 84, 84], dtype=u8)},
            batch_size=[2, 3]),
        label: NonTensorStack([\"left\", \"right\"], batch_size=[2]),
        next: TensorDict(
            fields={
                done: Tensor(shape=[2, 1], dtype=bool),
                observation: Tensor(shape=[2, 4], dtype=f32),
                reward: Tensor(shape=[2, 1], dtype=f32)},
            batch_size=[2]),
        observation: Tensor(shape=[2, 4], dtype=f32)},
    batch_size=[2])";
    assert_eq!(batch().to_string(), expected);
}

#[test]
fn a_row_shows_single_non_tensor_values_as_data() {
    let mut row = batch()
        .index(1)
        .unwrap()
        .select(["action", "env_index", "label"], true)
        .unwrap();
    row.set("temperature", NonTensor::Float(0.5)).unwrap();
    row.set("truncated_by_user", NonTensor::Bool(false))
        .unwrap();
    let expected = "\
TensorDict(
    fields={
        action: Tensor(shape=[1], dtype=i64),
        env_index: NonTensorData(data=1),
        label: NonTensorData(data=\"right\"),
        temperature: NonTensorData(data=0.5),
        truncated_by_user: NonTensorData(data=false)},
    batch_size=[])";
    assert_eq!(row.to_string(), expected);
}

#[test]
fn an_empty_tensordict() {
    let expected = "\
TensorDict(
    fields={},
    batch_size=[0, 3])";
    assert_eq!(TensorDict::new(&[0, 3]).to_string(), expected);
}

/// One env's step: CartPole (4 observations) or Pendulum (3, and a
/// `torque` at the root and under `next`).
fn env_step(pendulum: bool) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    let (obs_dim, name) = if pendulum {
        (3, "Pendulum")
    } else {
        (4, "CartPole")
    };
    td.set("observation", Tensor::zeros(DType::F32, &[obs_dim]))
        .unwrap();
    td.set(("next", "reward"), Tensor::zeros(DType::F32, &[1]))
        .unwrap();
    td.set("env_name", NonTensor::from(name)).unwrap();
    if pendulum {
        td.set(("next", "torque"), Tensor::zeros(DType::Bool, &[1]))
            .unwrap();
        td.set("torque", Tensor::zeros(DType::I64, &[2])).unwrap();
    }
    td
}

#[test]
fn a_lazy_stack_with_exclusive_keys() {
    let lazy =
        TensorDict::lazy_stack(vec![env_step(false), env_step(true), env_step(false)]).unwrap();
    let expected = "\
LazyStackedTensorDict(
    fields={
        env_name: NonTensorStack([\"CartPole\", \"Pendulum\", \"CartPole\"], batch_size=[3]),
        next: LazyStackedTensorDict(
            fields={
                reward: Tensor(shape=[3, 1], dtype=f32)},
            exclusive_fields={
                1 -> \"torque\"},
            batch_size=[3],
            stack_dim=0),
        observation: <heterogeneous>},
    exclusive_fields={
        1 -> (\"next\", \"torque\"), \"torque\"},
    batch_size=[3],
    stack_dim=0)";
    assert_eq!(lazy.to_string(), expected);
    // Through `maybe_dense_stack`, which cannot stack these densely.
    let maybe =
        TensorDict::maybe_dense_stack(vec![env_step(false), env_step(true), env_step(false)])
            .unwrap();
    assert_eq!(maybe.to_string(), expected);
}

#[test]
fn a_dense_stack_shows_as_a_tensordict() {
    let dense = TensorDict::maybe_dense_stack(vec![env_step(false), env_step(false)]).unwrap();
    let expected = "\
TensorDict(
    fields={
        env_name: NonTensorStack([\"CartPole\", \"CartPole\"], batch_size=[2]),
        next: TensorDict(
            fields={
                reward: Tensor(shape=[2, 1], dtype=f32)},
            batch_size=[2]),
        observation: Tensor(shape=[2, 4], dtype=f32)},
    batch_size=[2])";
    assert_eq!(dense.to_string(), expected);
}
