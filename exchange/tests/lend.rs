//! A slot's areas lent to its worker as in-place views: the env reads its
//! action where the parent wrote it and writes its result where the parent
//! reads it; what is not a view is copied; a failed command leaves the
//! slot busy; a lazy view of the last result goes stale, never torn.
#![cfg(not(loom))]

use exchange::{
    Area, Exchange, Field, ReadError, Receive, Received, Schema, WriteError, FIRST_COMMAND,
};
use tensordict::{DType, Tensor, TensorDict};

fn input_schema() -> Schema {
    Schema::new(&[], vec![Field::new("action", DType::I64, &[1]).unwrap()]).unwrap()
}

fn step_schema() -> Schema {
    Schema::new(
        &[],
        vec![
            Field::new("observation", DType::F32, &[4]).unwrap(),
            Field::new("reward", DType::F32, &[1]).unwrap(),
            Field::new("done", DType::Bool, &[1]).unwrap(),
        ],
    )
    .unwrap()
}

fn root_schema() -> Schema {
    Schema::new(
        &[],
        vec![Field::new("observation", DType::F32, &[4]).unwrap()],
    )
    .unwrap()
}

/// A parent and a worker's exchange over one region of `slots` slots.
fn pair(slots: usize) -> (Exchange, Exchange) {
    let parent =
        Exchange::create("lend", input_schema(), step_schema(), root_schema(), slots).unwrap();
    let worker = Exchange::open(
        parent.try_clone_fd().unwrap(),
        input_schema(),
        step_schema(),
        root_schema(),
    )
    .unwrap();
    (parent, worker)
}

/// The worker's buffers of slot `slot`, lent: input, result, next.
fn lend(worker: &Exchange, slot: usize) -> (TensorDict, TensorDict, TensorDict) {
    let mut result = step_schema().zeros();
    result
        .set("reward", Tensor::from_vec(&[1], vec![0.25f32]).unwrap())
        .unwrap();
    // SAFETY: one lend per slot, used only between begin_lent and a
    // publish, by this test's one worker.
    #[allow(unsafe_code)]
    unsafe {
        (
            worker
                .lend_area(slot, Area::Input, &input_schema().zeros())
                .unwrap(),
            worker.lend_area(slot, Area::Result, &result).unwrap(),
            worker
                .lend_area(slot, Area::Next, &root_schema().zeros())
                .unwrap(),
        )
    }
}

/// The observation column of a received batch.
fn observation(got: &Received) -> Vec<f32> {
    got.batch()
        .tensor("observation")
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn action(value: i64) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set("action", Tensor::from_vec(&[1], vec![value]).unwrap())
        .unwrap();
    td
}

/// The worker's side of one step: the command taken, the action read from
/// the input view, the observation written into the result view.
fn step_in_place(worker: &Exchange, slot: usize, input: &TensorDict, result: &mut TensorDict) {
    assert_eq!(worker.try_take_command(slot).unwrap(), Some(FIRST_COMMAND));
    let write = worker.begin_lent(slot);
    let a = input.tensor("action").unwrap().item::<i64>().unwrap() as f32;
    result
        .tensor_mut("observation")
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .copy_from_slice(&[a, a + 1.0, a + 2.0, a + 3.0]);
    worker
        .publish_lent_at(write, Some(result), None, 7)
        .unwrap();
}

#[test]
fn an_env_reads_and_writes_its_slot_in_place() {
    let (mut parent, worker) = pair(2);
    let (input, mut result, _next) = lend(&worker, 1);
    for round in 0..3 {
        parent.write_input(1, &action(10 * round)).unwrap();
        parent.post(1, FIRST_COMMAND).unwrap();
        step_in_place(&worker, 1, &input, &mut result);
        let got = parent.receive(Receive::new()).unwrap();
        assert_eq!(got.slots(), &[1]);
        let a = (10 * round) as f32;
        assert_eq!(observation(&got), vec![a, a + 1.0, a + 2.0, a + 3.0]);
        // The template's value, written at the lend, is published too.
        assert_eq!(
            got.batch()
                .tensor("reward")
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0.25]
        );
        // The root was not published: the next area is not in the batch.
        assert!(
            got.next().is_none_or(|n| n.get("observation").is_none()),
            "{:?}",
            got.next()
        );
    }
}

#[test]
fn a_replaced_view_is_copied_and_a_removed_one_is_absent() {
    let (mut parent, worker) = pair(1);
    let (input, mut result, mut next) = lend(&worker, 0);
    parent.write_input(0, &action(1)).unwrap();
    parent.post(0, FIRST_COMMAND).unwrap();
    assert_eq!(worker.try_take_command(0).unwrap(), Some(FIRST_COMMAND));
    let write = worker.begin_lent(0);
    assert_eq!(input.tensor("action").unwrap().item::<i64>().unwrap(), 1);
    // The env sets a new observation (not the view) and drops "done".
    result
        .set("observation", Tensor::full(&[4], 3.5f32))
        .unwrap();
    result.remove("done").unwrap();
    next.tensor_mut("observation")
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .fill(9.0);
    worker
        .publish_lent_at(write, Some(&result), Some(&next), 1)
        .unwrap();
    let got = parent.receive(Receive::new()).unwrap();
    let batch = got.batch();
    assert_eq!(
        batch
            .tensor("observation")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![3.5; 4]
    );
    assert!(batch.get("done").is_none(), "{batch:?}");
    assert_eq!(
        got.next()
            .unwrap()
            .tensor("observation")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![9.0; 4]
    );
}

#[test]
fn a_misfit_is_an_error_and_leaves_the_slot_busy_until_the_next_write() {
    let (mut parent, worker) = pair(1);
    let (input, mut result, _next) = lend(&worker, 0);
    parent.write_input(0, &action(2)).unwrap();
    parent.post(0, FIRST_COMMAND).unwrap();
    assert_eq!(worker.try_take_command(0).unwrap(), Some(FIRST_COMMAND));
    let write = worker.begin_lent(0);
    let mut wrong = result.clone();
    wrong
        .set("reward", Tensor::zeros(DType::F64, &[1]))
        .unwrap();
    let err = worker
        .publish_lent_at(write, Some(&wrong), None, 1)
        .unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::Schema {
                slot: 0,
                area: Area::Result,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("reward"), "{err}");
    // Busy: no result, and a read of the slot says so.
    assert!(parent
        .receive(Receive::new().timeout(std::time::Duration::ZERO))
        .is_err());
    let (mut r, mut n) = (step_schema().zeros(), root_schema().zeros());
    assert_eq!(
        parent.read_into(0, 0, &mut r, &mut n).unwrap_err(),
        ReadError::Busy { slot: 0 }
    );
    // The next command's write carries on and publishes.
    parent.write_input(0, &action(3)).unwrap();
    parent.post(0, FIRST_COMMAND).unwrap();
    step_in_place(&worker, 0, &input, &mut result);
    let got = parent.receive(Receive::new()).unwrap();
    assert_eq!(observation(&got), vec![3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn a_lazy_view_of_the_last_result_goes_stale_while_the_env_writes() {
    let (mut parent, worker) = pair(1);
    let (input, mut result, _next) = lend(&worker, 0);
    parent.write_input(0, &action(1)).unwrap();
    parent.post(0, FIRST_COMMAND).unwrap();
    step_in_place(&worker, 0, &input, &mut result);
    let got = parent.receive(Receive::new()).unwrap();
    let view = got.view(0);
    assert_eq!(view.read().unwrap(), got.row(0));
    parent.write_input(0, &action(5)).unwrap();
    parent.post(0, FIRST_COMMAND).unwrap();
    assert_eq!(worker.try_take_command(0).unwrap(), Some(FIRST_COMMAND));
    let write = worker.begin_lent(0);
    result
        .tensor_mut("observation")
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .fill(-1.0);
    // Mid-write: the old view is stale, never the half-written bytes.
    assert!(view.is_stale());
    assert!(matches!(view.read(), Err(ReadError::Stale { .. })));
    worker
        .publish_lent_at(write, Some(&result), None, 2)
        .unwrap();
    assert!(matches!(view.read(), Err(ReadError::Stale { .. })));
}

#[test]
fn a_template_outside_the_schema_is_not_lent() {
    let (_parent, worker) = pair(1);
    let mut extra = step_schema().zeros();
    extra.set("extra", Tensor::zeros(DType::U8, &[1])).unwrap();
    let mut other_dtype = step_schema().zeros();
    other_dtype
        .set("reward", Tensor::zeros(DType::F64, &[1]))
        .unwrap();
    let mut fewer = step_schema().zeros();
    fewer.remove("done").unwrap();
    // SAFETY: each lend is dropped at once and never used.
    #[allow(unsafe_code)]
    unsafe {
        assert!(worker.lend_area(0, Area::Result, &extra).is_none());
        assert!(worker.lend_area(0, Area::Result, &other_dtype).is_none());
        // A template with fewer keys than the schema is lent: the keys it
        // lacks are never published.
        let lent = worker.lend_area(0, Area::Result, &fewer).unwrap();
        assert_eq!(lent.len(), 2);
    }
}
