//! Properties of the binary codec: round trips, determinism, and that
//! truncated, corrupted or random bytes give an error, never a panic.

mod common;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use tensordict::{decode, encode, encode_into, DType, DecodeError, NonTensor, Tensor, TensorDict};

/// The magic bytes and version every message starts with.
fn header() -> Vec<u8> {
    let mut bytes = b"RLTD".to_vec();
    bytes.push(1);
    bytes
}

fn push_u32(bytes: &mut Vec<u8>, v: u32) {
    bytes.extend_from_slice(&v.to_le_bytes());
}

fn push_u64(bytes: &mut Vec<u8>, v: u64) {
    bytes.extend_from_slice(&v.to_le_bytes());
}

/// A message with batch size `[]` and one entry named `x` of this kind,
/// whose payload the caller appends.
fn one_entry(kind: u8) -> Vec<u8> {
    let mut bytes = header();
    push_u32(&mut bytes, 0); // batch ndim
    push_u32(&mut bytes, 1); // entry count
    push_u32(&mut bytes, 1); // key length
    bytes.push(b'x');
    bytes.push(kind);
    bytes
}

// Tags of the layout in `src/codec.rs`, written out to craft messages.
/// Entry kind: a tensor.
const KIND_TENSOR: u8 = 0;
/// Entry kind: a non-tensor value.
const KIND_NON_TENSOR: u8 = 1;
/// Entry kind: a sub-dict.
const KIND_DICT: u8 = 2;
/// Value tag: an f64.
const VALUE_FLOAT: u8 = 1;
/// Value tag: a string.
const VALUE_STR: u8 = 3;
/// Value tag: a stack of values.
const VALUE_STACK: u8 = 4;

/// Checks what the decoder promises of any input: no panic (a panic fails
/// the proptest case), and bytes that decode are the canonical encoding of
/// what they decode to, which decodes again.
fn check_decode_total(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(td) = decode(bytes) {
        let again = encode(&td);
        prop_assert_eq!(&again, bytes, "decoded bytes re-encode differently");
        let td2 = decode(&again);
        prop_assert!(td2.is_ok(), "re-encoded message does not decode: {:?}", td2);
    }
    Ok(())
}

proptest! {
    #[test]
    fn decode_inverts_encode(td in common::tensordict()) {
        let bytes = encode(&td);
        prop_assert_eq!(decode(&bytes), Ok(td));
    }

    #[test]
    fn encode_is_deterministic(td in common::tensordict(), prefix in vec(any::<u8>(), 0..8)) {
        let bytes = encode(&td);
        prop_assert_eq!(&encode(&td), &bytes);
        prop_assert_eq!(&encode(&td.clone()), &bytes);
        // Insertion order does not matter: keys are sorted.
        let mut reversed = TensorDict::new(td.batch_size());
        for (key, entry) in td.iter().collect::<Vec<_>>().into_iter().rev() {
            reversed.set(key, entry.clone()).unwrap();
        }
        prop_assert_eq!(&encode(&reversed), &bytes);
        // `encode_into` appends exactly the message.
        let mut out = prefix.clone();
        encode_into(&td, &mut out);
        prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        prop_assert_eq!(&out[prefix.len()..], &bytes[..]);
    }

    #[test]
    fn every_truncation_is_an_error(td in common::tensordict(), cut in any::<Index>()) {
        let bytes = encode(&td);
        let len = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..len]).is_err(), "a prefix of {} bytes decoded", len);
    }

    #[test]
    fn a_corrupted_byte_never_panics(
        td in common::tensordict(),
        at in any::<Index>(),
        flip in 1..=255u8,
    ) {
        let mut bytes = encode(&td);
        let at = at.index(bytes.len());
        bytes[at] ^= flip;
        check_decode_total(&bytes)?;
    }

    #[test]
    fn a_corrupted_byte_after_the_header_never_panics(
        td in common::tensordict(),
        at in any::<Index>(),
        value in any::<u8>(),
    ) {
        // Overwrite (rather than flip) a byte past the header: small values
        // such as 0 and 1 reach deeper into the decoder.
        let mut bytes = encode(&td);
        let at = 5 + at.index(bytes.len() - 5);
        bytes[at] = value;
        check_decode_total(&bytes)?;
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        check_decode_total(&bytes)?;
    }

    #[test]
    fn random_bodies_after_a_valid_header_never_panic(
        body in vec(prop_oneof![4 => 0..3u8, 1 => any::<u8>()], 0..256),
    ) {
        let mut bytes = header();
        bytes.extend_from_slice(&body);
        check_decode_total(&bytes)?;
    }

    #[test]
    fn nan_non_tensor_floats_round_trip_bit_for_bit(bits in vec(any::<u64>(), 1..4)) {
        // `NonTensor::Float` compares with `f64 ==`, so compare encodings.
        let values: Vec<NonTensor> = bits
            .iter()
            .map(|&b| NonTensor::Float(f64::from_bits(b | 0x7ff0_0000_0000_0001)))
            .collect();
        let mut td = TensorDict::new(&[values.len()]);
        td.set("nan", NonTensor::from(values)).unwrap();
        let bytes = encode(&td);
        let back = decode(&bytes).unwrap();
        prop_assert_eq!(encode(&back), bytes);
    }
}

#[test]
fn every_dtype_and_kind_round_trips() {
    let mut td = TensorDict::new(&[2]);
    for dtype in DType::ALL {
        td.set(("tensors", dtype.name()), Tensor::zeros(dtype, &[2, 3]))
            .unwrap();
    }
    td.set("nan", Tensor::from_vec(&[2], vec![f32::NAN, -0.0]).unwrap())
        .unwrap();
    td.set(
        "values",
        NonTensor::Stack(
            vec![
                NonTensor::Stack(vec![NonTensor::Int(i64::MIN), NonTensor::Float(-0.0)].into()),
                NonTensor::Stack(vec![NonTensor::Bool(true), NonTensor::from("ünï\u{0}")].into()),
            ]
            .into(),
        ),
    )
    .unwrap();
    td.set("empty", TensorDict::new(&[2, 0])).unwrap();
    td.set(("deep", "er", "est"), Tensor::full(&[2], 7i16))
        .unwrap();
    let bytes = encode(&td);
    assert_eq!(decode(&bytes), Ok(td));
}

#[test]
fn a_tensor_claiming_2_pow_40_elements_is_refused_before_allocating() {
    // u8 [2^40]: a terabyte announced, a few bytes given.
    let mut bytes = one_entry(KIND_TENSOR);
    bytes.push(DType::U8.tag());
    push_u32(&mut bytes, 1);
    push_u64(&mut bytes, 1 << 40);
    bytes.extend_from_slice(&[0; 16]);
    assert!(matches!(
        decode(&bytes),
        Err(DecodeError::Truncated { what: "tensor data", needed, .. }) if needed == 1 << 40
    ));

    // f64 [2^22, 2^22, 2^22]: the byte count overflows.
    let mut bytes = one_entry(KIND_TENSOR);
    bytes.push(DType::F64.tag());
    push_u32(&mut bytes, 3);
    for _ in 0..3 {
        push_u64(&mut bytes, 1 << 22);
    }
    assert!(matches!(decode(&bytes), Err(DecodeError::Invalid { .. })));
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    // A batch size of u32::MAX dims.
    let mut bytes = header();
    push_u32(&mut bytes, u32::MAX);
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

    // u32::MAX entries.
    let mut bytes = header();
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, u32::MAX);
    bytes.extend_from_slice(&[0; 64]);
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

    // A key of u32::MAX bytes.
    let mut bytes = header();
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 1);
    push_u32(&mut bytes, u32::MAX);
    bytes.extend_from_slice(&[b'k'; 64]);
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

    // A string of u32::MAX bytes.
    let mut bytes = one_entry(KIND_NON_TENSOR);
    bytes.push(VALUE_STR);
    push_u32(&mut bytes, u32::MAX);
    bytes.extend_from_slice(b"short");
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

    // A non-tensor stack of u32::MAX values.
    let mut bytes = one_entry(KIND_NON_TENSOR);
    bytes.push(VALUE_STACK);
    push_u32(&mut bytes, u32::MAX);
    bytes.extend_from_slice(&[VALUE_FLOAT; 64]);
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

    // A sub-dict whose batch size has u32::MAX dims.
    let mut bytes = one_entry(KIND_DICT);
    push_u32(&mut bytes, u32::MAX);
    assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));
}

#[test]
fn zero_sized_tensors_with_huge_dims_decode_and_round_trip() {
    // [0, 2^62] holds no element: valid, and nothing to allocate.
    let mut bytes = one_entry(KIND_TENSOR);
    bytes.push(DType::F32.tag());
    push_u32(&mut bytes, 2);
    push_u64(&mut bytes, 0);
    push_u64(&mut bytes, 1 << 62);
    let td = decode(&bytes).unwrap();
    assert_eq!(td.tensor("x").unwrap().shape(), &[0, 1 << 62]);
    assert_eq!(encode(&td), bytes);
}

#[test]
fn well_formed_but_invalid_content_is_refused() {
    // A sub-dict whose batch size does not start with its parent's.
    let mut bytes = header();
    push_u32(&mut bytes, 1);
    push_u64(&mut bytes, 2); // batch [2]
    push_u32(&mut bytes, 1);
    push_u32(&mut bytes, 1);
    bytes.push(b's');
    bytes.push(KIND_DICT);
    push_u32(&mut bytes, 1);
    push_u64(&mut bytes, 3); // sub-batch [3]
    push_u32(&mut bytes, 0);
    assert!(matches!(decode(&bytes), Err(DecodeError::Invalid { .. })));

    // A scalar non-tensor value in a tensordict of batch size [2].
    let mut bytes = header();
    push_u32(&mut bytes, 1);
    push_u64(&mut bytes, 2);
    push_u32(&mut bytes, 1);
    push_u32(&mut bytes, 1);
    bytes.push(b'v');
    bytes.push(KIND_NON_TENSOR);
    bytes.push(VALUE_FLOAT);
    push_u64(&mut bytes, 0);
    assert!(matches!(decode(&bytes), Err(DecodeError::Invalid { .. })));

    // An empty key.
    let mut bytes = header();
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 1);
    push_u32(&mut bytes, 0);
    bytes.push(KIND_DICT);
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 0);
    assert!(matches!(decode(&bytes), Err(DecodeError::Invalid { .. })));

    // A key that is not UTF-8.
    let mut bytes = header();
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 1);
    push_u32(&mut bytes, 1);
    bytes.push(0xff);
    bytes.push(KIND_DICT);
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 0);
    assert!(matches!(
        decode(&bytes),
        Err(DecodeError::InvalidUtf8 { .. })
    ));
}

#[test]
fn sub_dicts_nested_past_the_limit_are_refused() {
    // 100 nested sub-dicts, each with one entry named `d`.
    let mut bytes = header();
    for _ in 0..100 {
        push_u32(&mut bytes, 0);
        push_u32(&mut bytes, 1);
        push_u32(&mut bytes, 1);
        bytes.push(b'd');
        bytes.push(KIND_DICT);
    }
    push_u32(&mut bytes, 0);
    push_u32(&mut bytes, 0);
    assert!(matches!(decode(&bytes), Err(DecodeError::TooDeep { .. })));

    // 30 levels are fine.
    let mut td = TensorDict::new(&[]);
    let key: Vec<&str> = vec!["d"; 30];
    td.set(key.as_slice(), Tensor::scalar(1.0f64)).unwrap();
    assert_eq!(decode(&encode(&td)), Ok(td));
}

#[test]
fn nesting_round_trips_up_to_the_documented_limit_and_is_refused_beyond() {
    // `encode` documents that nesting deeper than 64 levels (sub-dicts and
    // non-tensor stacks together) does not decode: the decoder refuses it
    // with `TooDeep` rather than recursing without bound.
    let nested_value = |depth: usize| {
        let mut value = NonTensor::Int(1);
        for _ in 0..depth {
            value = NonTensor::Stack(vec![value].into());
        }
        let mut td = TensorDict::new(&[]);
        td.set("v", value).unwrap();
        td
    };
    let td = nested_value(63);
    assert_eq!(decode(&encode(&td)), Ok(td));
    assert!(matches!(
        decode(&encode(&nested_value(64))),
        Err(DecodeError::TooDeep { .. })
    ));

    let nested_key = |parts: usize| {
        let mut td = TensorDict::new(&[]);
        let key: Vec<&str> = vec!["d"; parts];
        td.set(key.as_slice(), Tensor::scalar(1u8)).unwrap();
        td
    };
    let td = nested_key(65);
    assert_eq!(decode(&encode(&td)), Ok(td));
    assert!(matches!(
        decode(&encode(&nested_key(66))),
        Err(DecodeError::TooDeep { .. })
    ));
}
