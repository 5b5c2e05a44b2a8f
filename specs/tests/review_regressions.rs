//! The inputs of a review that made public functions panic (or leave state
//! behind), each now a typed error naming the shape, key or env.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rand::rngs::StdRng;
use rand::SeedableRng;
use specs::{Composite, Mismatch, SpecError, TensorSpec, MAX_VALUE_BYTES};
use tensordict::{DType, Entry, NestedKey, Tensor, TensorDict};

fn rng() -> StdRng {
    StdRng::seed_from_u64(0)
}

/// Runs `f`, failing the test (with the panic message) if it panics.
fn no_panic<T>(f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("panicked: {message}")
        }
    }
}

fn is_invalid_shape(result: Result<TensorSpec, SpecError>, shape: &str) {
    let err = result.unwrap_err();
    assert!(matches!(err, SpecError::Invalid { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("shape {shape}")), "{err}");
}

#[test]
fn shapes_whose_size_overflows_are_refused_by_every_constructor() {
    no_panic(|| {
        // Each used to be accepted, then panicked in try_rand / try_zero /
        // rand / zero with "capacity overflow".
        is_invalid_shape(
            TensorSpec::multi_categorical(&[usize::MAX, 1], DType::I64, vec![2]),
            "[18446744073709551615, 1]",
        );
        is_invalid_shape(
            TensorSpec::try_non_tensor(&[usize::MAX]),
            "[18446744073709551615]",
        );
        is_invalid_shape(
            TensorSpec::categorical(&[usize::MAX, 2], DType::I64, 2),
            "[18446744073709551615, 2]",
        );
        is_invalid_shape(
            TensorSpec::try_unbounded(&[usize::MAX, 2], DType::F32),
            "[18446744073709551615, 2]",
        );
        is_invalid_shape(
            TensorSpec::binary(&[usize::MAX, 2], DType::Bool),
            "[18446744073709551615, 2]",
        );
        is_invalid_shape(
            TensorSpec::one_hot(&[usize::MAX, 2], DType::I64),
            "[18446744073709551615, 2]",
        );
    });
}

#[test]
fn values_over_the_limit_are_errors_not_aborts() {
    assert_eq!(MAX_VALUE_BYTES, 1 << 34);
    no_panic(|| {
        let spec = TensorSpec::unbounded(&[1 << 40], DType::F32);
        assert!(matches!(spec.try_zero(), Err(SpecError::TooLarge { .. })));
        assert!(matches!(
            spec.try_rand(&mut rng()),
            Err(SpecError::TooLarge { .. })
        ));
        let nt = TensorSpec::non_tensor(&[1 << 40]);
        assert!(matches!(nt.try_zero(), Err(SpecError::TooLarge { .. })));
        let c = Composite::new(&[]).with("obs", spec).unwrap();
        let err = c.try_zero().unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"spec at key "obs" is too large"#),
            "{err}"
        );
    });
}

#[test]
fn a_bool_tensor_holding_byte_two_is_not_contained() {
    let mut t = Tensor::zeros(DType::Bool, &[1]);
    t.bytes_mut()[0] = 2;
    let spec = TensorSpec::binary(&[1], DType::Bool).unwrap();
    let err =
        no_panic(|| spec.check(&NestedKey::from("done"), &Entry::Tensor(t.clone()))).unwrap_err();
    assert!(
        matches!(
            err,
            SpecError::NotContained {
                mismatch: Mismatch::OutOfBounds { index: 0, .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        r#"value at key "done" is out of bounds: element 0 is byte 2, outside [0, 1]"#
    );
}

#[test]
fn a_failed_set_leaves_no_composite_behind() {
    let mut c = Composite::new(&[4]);
    let before = c.clone();
    let err = c
        .set(("next", "obs"), TensorSpec::unbounded(&[3], DType::F32))
        .unwrap_err();
    assert!(matches!(err, SpecError::ShapePrefix { .. }), "{err:?}");
    assert_eq!(c, before);
    assert!(c.get("next").is_none());
}

#[test]
fn stacked_containment_errors_name_the_env() {
    let env = |n: usize, high: f64| -> TensorSpec {
        Composite::new(&[])
            .with(
                "observation",
                TensorSpec::bounded(&[n], DType::F32, -high, high).unwrap(),
            )
            .unwrap()
            .into()
    };
    // Lazy: env 1 has other bounds.
    let lazy = TensorSpec::lazy_stack(vec![env(2, 2.0), env(2, 1.0)]).unwrap();
    let mut td = TensorDict::new(&[2]);
    td.set(
        "observation",
        Tensor::from_vec(&[2, 2], vec![0.0f32, 0.0, 0.0, 1.5]).unwrap(),
    )
    .unwrap();
    let err = lazy
        .check(&NestedKey::default(), &Entry::Dict(td.clone()))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"value at key "observation", env 1: is out of bounds: element 1 is 1.5, outside [-1, 1]"#
    );
    // Dense: the row along the env dim.
    let dense = TensorSpec::stack(&[env(2, 1.0), env(2, 1.0)]).unwrap();
    let err = dense
        .check(&NestedKey::default(), &Entry::Dict(td))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"value at key "observation", env 1: is out of bounds: element 1 is 1.5, outside [-1, 1]"#
    );
}
