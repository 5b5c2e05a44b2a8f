//! Properties of specs on random specs of every kind: samples are contained,
//! zeros are contained where zero is in the domain, and indexing a stack
//! gives each env's spec back.

use proptest::prelude::*;
use proptest::sample::select;
use rand::rngs::StdRng;
use rand::SeedableRng;
use specs::{Composite, SpecError, TensorSpec};
use tensordict::{DType, Tensor};

const INTS: [DType; 5] = [DType::U8, DType::I8, DType::I16, DType::I32, DType::I64];

/// Up to 3 dims of size 0..4.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, 0..=3)
}

/// 1 to 3 dims of size 0..4, the last at least `min_last`.
fn shape_with_last(min_last: usize) -> impl Strategy<Value = Vec<usize>> {
    (prop::collection::vec(0usize..4, 0..=2), min_last..4).prop_map(|(mut s, last)| {
        s.push(last);
        s
    })
}

fn non_float() -> impl Strategy<Value = DType> {
    select(vec![
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
    ])
}

/// The largest value of a non-float dtype.
fn max_of(dtype: DType) -> i64 {
    match dtype {
        DType::Bool => 1,
        DType::U8 => u8::MAX.into(),
        DType::I8 => i8::MAX.into(),
        DType::I16 => i16::MAX.into(),
        DType::I32 => i32::MAX.into(),
        _ => i64::MAX,
    }
}

fn min_of(dtype: DType) -> i64 {
    match dtype {
        DType::Bool | DType::U8 => 0,
        DType::I8 => i8::MIN.into(),
        DType::I16 => i16::MIN.into(),
        DType::I32 => i32::MIN.into(),
        _ => i64::MIN,
    }
}

/// A number of categories for `dtype`: small, or the most it holds.
fn categories(dtype: DType) -> impl Strategy<Value = i64> {
    let most = max_of(dtype).saturating_add(1);
    prop_oneof![1..=most.min(6), Just(most)]
}

fn float_bound() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1e3..1e3f64,
        1 => Just(0.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::MAX),
        1 => Just(-f64::MAX),
    ]
}

fn int_bound() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -20i64..20,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => any::<i64>(),
    ]
}

fn bounded() -> impl Strategy<Value = TensorSpec> {
    let floats = (
        shape(),
        select(vec![DType::F32, DType::F64]),
        float_bound(),
        float_bound(),
    )
        .prop_map(|(shape, dtype, a, b)| {
            TensorSpec::bounded(&shape, dtype, a.min(b), a.max(b)).unwrap()
        });
    let ints = (shape(), select(INTS.to_vec()), int_bound(), int_bound()).prop_map(
        |(shape, dtype, a, b)| {
            let (a, b) = (
                a.clamp(min_of(dtype), max_of(dtype)),
                b.clamp(min_of(dtype), max_of(dtype)),
            );
            TensorSpec::bounded(&shape, dtype, a.min(b) as f64, a.max(b) as f64).unwrap()
        },
    );
    let per_element = shape().prop_flat_map(|shape| {
        let numel = shape.iter().product::<usize>();
        (
            Just(shape),
            any::<bool>(),
            prop::collection::vec((-5.0..5.0f64, 0.0..3.0f64), numel),
        )
            .prop_map(|(shape, single, bounds)| {
                let (low, high): (Vec<f64>, Vec<f64>) =
                    bounds.into_iter().map(|(lo, w)| (lo, lo + w)).unzip();
                let (low, high) = if single {
                    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<_>>();
                    (
                        Tensor::from_vec(&shape, f(low)).unwrap(),
                        Tensor::from_vec(&shape, f(high)).unwrap(),
                    )
                } else {
                    (
                        Tensor::from_vec(&shape, low).unwrap(),
                        Tensor::from_vec(&shape, high).unwrap(),
                    )
                };
                TensorSpec::bounded_tensors(low, high).unwrap()
            })
    });
    prop_oneof![floats, ints, per_element]
}

/// A leaf spec of any kind, with a dtype that fits it.
fn leaf() -> impl Strategy<Value = TensorSpec> {
    let unbounded = (shape(), select(DType::ALL.to_vec()))
        .prop_map(|(shape, dtype)| TensorSpec::unbounded(&shape, dtype));
    let categorical = (shape(), non_float()).prop_flat_map(|(shape, dtype)| {
        categories(dtype).prop_map(move |n| TensorSpec::categorical(&shape, dtype, n).unwrap())
    });
    let one_hot = (shape_with_last(1), non_float())
        .prop_map(|(shape, dtype)| TensorSpec::one_hot(&shape, dtype).unwrap());
    let binary = (shape(), non_float())
        .prop_map(|(shape, dtype)| TensorSpec::binary(&shape, dtype).unwrap());
    let multi = (shape_with_last(0), non_float()).prop_flat_map(|(shape, dtype)| {
        let last = *shape.last().unwrap();
        prop::collection::vec(categories(dtype), last)
            .prop_map(move |nvec| TensorSpec::multi_categorical(&shape, dtype, nvec).unwrap())
    });
    let non_tensor = shape().prop_map(|shape| TensorSpec::non_tensor(&shape));
    prop_oneof![
        unbounded,
        bounded(),
        categorical,
        one_hot,
        binary,
        multi,
        non_tensor
    ]
}

/// A composite of shape `[]` with a few leaves, some nested.
fn composite() -> impl Strategy<Value = TensorSpec> {
    let key = select(vec![
        vec!["observation"],
        vec!["action"],
        vec!["next", "reward"],
        vec!["next", "done"],
    ]);
    prop::collection::vec((key, leaf()), 0..4).prop_map(|entries| {
        let mut c = Composite::new(&[]);
        for (key, spec) in entries {
            c.set(key.as_slice(), spec).unwrap();
        }
        TensorSpec::Composite(c)
    })
}

/// Any spec this crate's constructors make, but stacks.
fn spec() -> impl Strategy<Value = TensorSpec> {
    prop_oneof![4 => leaf(), 1 => composite()]
}

/// True if the spec's plain zeros are in its domain.
fn zero_is_valid(spec: &TensorSpec) -> bool {
    match spec {
        TensorSpec::Bounded(b) => {
            b.low().to_f64_vec().iter().all(|&l| l <= 0.0)
                && b.high().to_f64_vec().iter().all(|&h| h >= 0.0)
        }
        TensorSpec::OneHot(oh) => oh.shape().iter().product::<usize>() == 0,
        TensorSpec::Composite(c) => c.leaves().into_iter().all(|(_, s)| zero_is_valid(s)),
        _ => true,
    }
}

proptest! {
    #[test]
    fn samples_are_contained(spec in spec(), seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let value = spec.rand(&mut rng);
        let checked = spec.check(&Default::default(), &value);
        prop_assert!(checked.is_ok(), "{spec}: {value:?}: {checked:?}");
        prop_assert_eq!(spec.rand(&mut StdRng::seed_from_u64(seed)), value);
    }

    #[test]
    fn zeros_are_contained_where_zero_is_in_the_domain(spec in spec()) {
        prop_assume!(zero_is_valid(&spec));
        let zero = spec.zero();
        prop_assert!(spec.is_in(&zero), "{spec}: {zero:?}");
    }

    #[test]
    fn indexing_a_dense_stack_gives_the_spec_back(spec in spec(), k in 1usize..5) {
        let stacked = TensorSpec::stack(&vec![spec.clone(); k]).unwrap();
        let mut shape = vec![k];
        shape.extend_from_slice(&spec.shape());
        prop_assert_eq!(stacked.shape().to_vec(), shape);
        prop_assert_eq!(stacked.kind(), spec.kind());
        for j in 0..k {
            prop_assert_eq!(stacked.index(j).unwrap(), spec.clone());
        }
        let out_of_range = stacked.index(k);
        prop_assert!(
            matches!(out_of_range, Err(SpecError::IndexOutOfRange { .. })),
            "{:?}",
            out_of_range
        );
        prop_assert_eq!(TensorSpec::lazy_stack(vec![spec.clone(); k]).unwrap(), stacked);
    }

    #[test]
    fn samples_of_a_dense_stack_are_contained(spec in spec(), k in 1usize..4, seed in any::<u64>()) {
        let stacked = TensorSpec::stack(&vec![spec.clone(); k]).unwrap();
        let value = stacked.rand(&mut StdRng::seed_from_u64(seed));
        prop_assert!(stacked.is_in(&value), "{stacked}: {value:?}");
    }

    #[test]
    fn indexing_a_lazy_stack_gives_each_spec_back(
        specs in prop::collection::vec(spec(), 1..4),
    ) {
        let stacked = TensorSpec::lazy_stack(specs.clone()).unwrap();
        prop_assert_eq!(stacked.shape()[0], specs.len());
        for (j, spec) in specs.iter().enumerate() {
            prop_assert_eq!(&stacked.index(j).unwrap(), spec);
        }
    }

    #[test]
    fn checking_arbitrary_bytes_never_panics(
        spec in leaf(),
        k in 1usize..3,
        seed in any::<u64>(),
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        // A tensor of the spec's shape and dtype whose bytes are anything
        // (bool bytes other than 0 or 1 included, which `bytes_mut` allows):
        // on its own and as a row of a dense stack, contained or a typed
        // error, never a panic.
        let Some(dtype) = spec.dtype() else { return Ok(()) };
        let mut tensor = Tensor::zeros(dtype, &spec.shape());
        for (b, &v) in tensor.bytes_mut().iter_mut().zip(bytes.iter().cycle()) {
            *b = v;
        }
        let entry = tensordict::Entry::Tensor(tensor.clone());
        let _ = spec.check(&Default::default(), &entry);
        let env = Composite::new(&[]).with("x", spec.clone()).unwrap();
        let batch = Composite::stack(&vec![env; k]).unwrap();
        let mut td = batch.rand(&mut StdRng::seed_from_u64(seed));
        let stacked = Tensor::stack(&vec![tensor; k]).unwrap();
        td.set("x", stacked).unwrap();
        if let Err(err) = batch.check(&td) {
            prop_assert!(err.to_string().contains(r#"key "x""#), "{}", err);
        }
    }

    #[test]
    fn dense_stacks_of_different_specs_name_the_env(a in spec(), b in spec()) {
        prop_assume!(a != b);
        let err = TensorSpec::stack(&[a.clone(), a, b]).unwrap_err();
        prop_assert!(
            matches!(err, SpecError::StackMismatch { index: 2, .. }),
            "{:?}",
            err
        );
        prop_assert!(err.to_string().contains("env 2"));
    }
}
