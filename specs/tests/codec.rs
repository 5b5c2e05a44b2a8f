//! The spec codec on random specs of every kind (nested composites with
//! batch shapes, dense and lazy stacks, stacked parts of any kind): encoding
//! round-trips, and decoding random, truncated or corrupted bytes never
//! panics and, when it succeeds, gives a spec whose encoding is those bytes.

use proptest::prelude::*;
use proptest::sample::select;
use specs::{Composite, SpecError, StackedSpec, TensorSpec};
use tensordict::{DType, Tensor};

const NON_FLOATS: [DType; 6] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
];

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

/// A number of categories for `dtype`: small, or the most it holds.
fn categories(dtype: DType) -> impl Strategy<Value = i64> {
    let most = max_of(dtype).saturating_add(1);
    prop_oneof![1..=most.min(6), Just(most)]
}

fn bounded() -> impl Strategy<Value = TensorSpec> {
    let float_bound = prop_oneof![
        4 => -1e3..1e3f64,
        1 => Just(-0.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::MIN_POSITIVE),
    ];
    let scalar = (
        shape(),
        select(vec![DType::F32, DType::F64]),
        float_bound.clone(),
        float_bound,
    )
        .prop_map(|(shape, dtype, a, b)| {
            TensorSpec::bounded(&shape, dtype, a.min(b), a.max(b)).unwrap()
        });
    let ints = (shape(), -100i64..100, 0i64..100).prop_map(|(shape, low, width)| {
        TensorSpec::bounded(&shape, DType::I8, low as f64, (low + width).min(127) as f64).unwrap()
    });
    let per_element = shape().prop_flat_map(|shape| {
        let numel = shape.iter().product::<usize>();
        (
            Just(shape),
            any::<bool>(),
            prop::collection::vec((any::<i32>(), 0..1000i32), numel),
        )
            .prop_map(|(shape, float, bounds)| {
                let (low, high): (Vec<i32>, Vec<i32>) = bounds
                    .into_iter()
                    .map(|(lo, w)| (lo, lo.saturating_add(w)))
                    .unzip();
                let (low, high) = if float {
                    let f = |v: Vec<i32>| v.into_iter().map(|x| x as f64 / 7.0).collect();
                    (
                        Tensor::from_vec::<f64>(&shape, f(low)).unwrap(),
                        Tensor::from_vec::<f64>(&shape, f(high)).unwrap(),
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
    prop_oneof![scalar, ints, per_element]
}

/// A leaf spec of any kind, with a dtype that fits it.
fn leaf() -> impl Strategy<Value = TensorSpec> {
    let non_float = || select(NON_FLOATS.to_vec());
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

fn key() -> impl Strategy<Value = String> {
    select(vec!["a", "b", "obs", "next", "é", "a b", "\u{1F600}", "Z"]).prop_map(String::from)
}

/// Any spec: leaves, composites of specs (shape `[]`), composites with a
/// batch shape (dense and lazy stacks of composites), and stacked specs
/// (lazy stacks of differing specs, and parts of any kind).
fn spec() -> impl Strategy<Value = TensorSpec> {
    leaf().prop_recursive(4, 48, 4, |inner| {
        let composite =
            prop::collection::btree_map(key(), inner.clone(), 0..4).prop_map(|entries| {
                let mut c = Composite::new(&[]);
                for (key, spec) in entries {
                    c.set(key.as_str(), spec).unwrap();
                }
                TensorSpec::Composite(c)
            });
        let parts = prop::collection::vec(inner.clone(), 1..4)
            .prop_map(|parts| TensorSpec::Stacked(StackedSpec::new(parts).unwrap()));
        let lazy = prop::collection::vec(inner.clone(), 1..4)
            .prop_filter_map("specs that do not stack", |specs| {
                TensorSpec::lazy_stack(specs).ok()
            });
        let dense = (inner, 1usize..3).prop_filter_map("too large to stack", |(spec, k)| {
            TensorSpec::stack(&vec![spec; k]).ok()
        });
        prop_oneof![2 => composite, 1 => parts, 1 => lazy, 1 => dense]
    })
}

/// Decodes `bytes`, which may be anything: an error, or a spec whose
/// encoding is `bytes` (the encoding is canonical).
fn decode_anything(bytes: &[u8]) -> Result<(), TestCaseError> {
    match TensorSpec::decode(bytes) {
        Ok(spec) => {
            prop_assert_eq!(spec.encode(), bytes, "{}", spec);
            // Decoded specs are specs: their shape and display work.
            let _ = (spec.shape(), spec.to_string());
        }
        Err(err) => {
            prop_assert!(matches!(err, SpecError::Decode { .. }), "{:?}", err);
            prop_assert!(err.to_string().starts_with("cannot decode spec at byte "));
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_spec_round_trips(spec in spec()) {
        let bytes = spec.encode();
        prop_assert_eq!(TensorSpec::decode(&bytes).unwrap(), spec.clone());
        let mut out = vec![0xAB];
        spec.encode_into(&mut out);
        prop_assert_eq!(&out[1..], bytes.as_slice());
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_anything(&bytes)?;
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..256),
        tag in 0u8..10,
    ) {
        // A valid header and tag, so the bytes reach the spec readers.
        let mut bytes = vec![b'S', 1, tag];
        bytes.extend_from_slice(&body);
        decode_anything(&bytes)?;
    }

    #[test]
    fn every_truncation_is_an_error(spec in spec(), cut in any::<prop::sample::Index>()) {
        let bytes = spec.encode();
        let len = cut.index(bytes.len());
        let err = TensorSpec::decode(&bytes[..len]);
        prop_assert!(err.is_err(), "a prefix of {} of {} bytes decoded", len, bytes.len());
    }

    #[test]
    fn corrupted_encodings_never_panic(
        spec in spec(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
        overwrite in prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let mut bytes = spec.encode();
        let len = bytes.len();
        for (at, bit) in flips {
            bytes[at.index(len)] ^= 1 << bit;
        }
        if let Some((at, byte)) = overwrite {
            bytes[at.index(len)] = byte;
        }
        decode_anything(&bytes)?;
    }
}
