//! Schemas: built from templates, validated across envs, checked against
//! writes, encoded and decoded; one test per error, with its message.

use exchange::{Field, Schema, SchemaDecodeError, SchemaError};
use proptest::prelude::*;
use tensordict::{DType, NestedKey, NonTensor, Tensor, TensorDict};

/// One CartPole step: what an env's `fake_tensordict` looks like.
fn cartpole() -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set("observation", Tensor::zeros(DType::F32, &[4]))
        .unwrap();
    td.set("action", Tensor::zeros(DType::I64, &[1])).unwrap();
    for key in ["done", "terminated", "truncated"] {
        td.set(key, Tensor::zeros(DType::Bool, &[1])).unwrap();
        td.set(("next", key), Tensor::zeros(DType::Bool, &[1]))
            .unwrap();
    }
    td.set(("next", "observation"), Tensor::zeros(DType::F32, &[4]))
        .unwrap();
    td.set(("next", "reward"), Tensor::zeros(DType::F32, &[1]))
        .unwrap();
    td
}

fn key(k: impl Into<NestedKey>) -> NestedKey {
    k.into()
}

#[test]
fn a_template_gives_its_tensor_leaves_in_key_order() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let keys: Vec<String> = schema.keys().map(ToString::to_string).collect();
    assert_eq!(
        keys,
        [
            r#""action""#,
            r#""done""#,
            r#"("next", "done")"#,
            r#"("next", "observation")"#,
            r#"("next", "reward")"#,
            r#"("next", "terminated")"#,
            r#"("next", "truncated")"#,
            r#""observation""#,
            r#""terminated""#,
            r#""truncated""#,
        ]
    );
    assert_eq!(schema.len(), 10);
    assert!(!schema.is_empty());
    assert_eq!(schema.batch_size(), &[] as &[usize]);
    assert_eq!(schema.nbytes(), 8 + 3 + 3 + 16 + 4 + 16);
    let reward = schema.field(("next", "reward")).unwrap();
    assert_eq!(reward.dtype(), DType::F32);
    assert_eq!(reward.shape(), &[1]);
    assert_eq!(reward.nbytes(), 4);
    assert_eq!(reward.numel(), 1);
    assert_eq!(reward.key(), &key(("next", "reward")));
    assert_eq!(reward.to_string(), r#"("next", "reward"): f32[1]"#);
    assert_eq!(schema.position(("next", "reward")), Some(4));
    assert_eq!(schema.position(key(("next", "reward"))), Some(4));
    assert_eq!(schema.position(["next", "reward"]), Some(4));
    assert!(schema.field("reward").is_none());
    assert!(schema.field("next").is_none());
    assert!(schema.field(("next", "reward", "x")).is_none());
    assert_eq!(&schema.fields()[0], schema.field("action").unwrap());
    let dicts: Vec<_> = schema
        .sub_dicts()
        .map(|(k, b)| (k.clone(), b.to_vec()))
        .collect();
    assert_eq!(dicts, [(key("next"), vec![])]);
}

#[test]
fn display_lists_the_fields() {
    let mut td = TensorDict::new(&[2]);
    td.set("observation", Tensor::zeros(DType::F32, &[2, 4]))
        .unwrap();
    td.set(("agents", "reward"), TensorDict::new(&[2, 3]))
        .unwrap();
    td.set(
        ("agents", "reward", "r"),
        Tensor::zeros(DType::F64, &[2, 3]),
    )
    .unwrap();
    let schema = Schema::from_template(&td).unwrap();
    assert_eq!(
        schema.to_string(),
        r#"Schema(batch_size=[2], 2 fields, 80 bytes)
    ("agents", "reward"): batch_size=[2, 3]
    ("agents", "reward", "r"): f64[2, 3]
    "observation": f32[2, 4]"#
    );
    let one = Schema::new(&[], vec![Field::new("x", DType::U8, &[]).unwrap()]).unwrap();
    assert_eq!(
        one.to_string(),
        "Schema(batch_size=[], 1 field, 1 bytes)\n    \"x\": u8[]"
    );
    assert_eq!(
        Schema::empty(&[]).to_string(),
        "Schema(batch_size=[], 0 fields, 0 bytes)"
    );
}

#[test]
fn zeros_gives_back_the_template_shape_with_nested_batch_sizes() {
    let mut td = TensorDict::new(&[2]);
    td.set("agents", TensorDict::new(&[2, 3])).unwrap();
    td.set(("agents", "obs"), Tensor::zeros(DType::F32, &[2, 3, 5]))
        .unwrap();
    td.set("empty", TensorDict::new(&[2])).unwrap();
    td.set("x", Tensor::zeros(DType::U8, &[2])).unwrap();
    let schema = Schema::from_template(&td).unwrap();
    assert_eq!(schema.zeros(), td);
    assert_eq!(Schema::from_template(&schema.zeros()).unwrap(), schema);
    assert_eq!(Schema::decode(&schema.encode()).unwrap(), schema);
    schema.check(&td).unwrap();
}

#[test]
fn an_empty_template_gives_an_empty_schema() {
    let schema = Schema::from_template(&TensorDict::new(&[3])).unwrap();
    assert!(schema.is_empty());
    assert_eq!(schema, Schema::empty(&[3]));
    assert_eq!(schema.nbytes(), 0);
    assert_eq!(Schema::decode(&schema.encode()).unwrap(), schema);
    schema.check(&TensorDict::new(&[3])).unwrap();
}

#[test]
fn a_non_tensor_leaf_is_an_error_naming_the_key() {
    let mut td = cartpole();
    td.set(("info", "name"), NonTensor::from("CartPole-v1"))
        .unwrap();
    let err = Schema::from_template(&td).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key ("info", "name") holds a non-tensor value, not a tensor: the shared-memory exchange carries fixed-shape tensors only; use the queue exchange for non-tensor data"#
    );
    let err = Schema::validate_envs(&[cartpole(), td]).unwrap_err();
    assert!(matches!(
        err,
        SchemaError::NonTensorLeaf { env: Some(1), .. }
    ));
    assert!(err
        .to_string()
        .starts_with(r#"env 1: key ("info", "name") holds a non-tensor value"#));
}

#[test]
fn identical_envs_validate_to_env_0s_schema() {
    let envs = vec![cartpole(); 4];
    let schema = Schema::validate_envs(&envs).unwrap();
    assert_eq!(schema, Schema::from_template(&cartpole()).unwrap());
}

#[test]
fn validating_no_env_is_an_error() {
    let err = Schema::validate_envs(&[]).unwrap_err();
    assert_eq!(err, SchemaError::NoEnvs);
    assert_eq!(
        err.to_string(),
        "no env templates: the shared-memory schema needs at least one env"
    );
}

#[test]
fn envs_must_share_a_batch_size() {
    let mut other = TensorDict::new(&[1]);
    other
        .set("observation", Tensor::zeros(DType::F32, &[1, 4]))
        .unwrap();
    let err = Schema::validate_envs(&[cartpole(), cartpole(), other]).unwrap_err();
    assert_eq!(err.to_string(), "env 2: batch size [1] but env 0 has []");
}

#[test]
fn envs_must_share_sub_dict_batch_sizes() {
    let env = |n: usize| {
        let mut td = TensorDict::new(&[]);
        td.set("agents", TensorDict::new(&[n])).unwrap();
        td.set(("agents", "obs"), Tensor::zeros(DType::F32, &[n]))
            .unwrap();
        td.set(("agents", "inner"), TensorDict::new(&[n, 1]))
            .unwrap();
        td
    };
    // Same tensors, a sub-dict's batch size differs.
    let mut a = env(2);
    let mut b = env(2);
    a.set(("agents", "sub"), TensorDict::new(&[2, 1])).unwrap();
    b.set(("agents", "sub"), TensorDict::new(&[2])).unwrap();
    let err = Schema::validate_envs(&[a, b]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"env 1: sub-dict ("agents", "sub") has batch size [2] but env 0 has [2, 1]"#
    );
    // An empty sub-dict that env 0 lacks is a key env 0 lacks.
    let mut c = env(2);
    c.set("extra", TensorDict::new(&[])).unwrap();
    let err = Schema::validate_envs(&[env(2), c.clone()]).unwrap_err();
    assert_eq!(err.to_string(), r#"env 1: key "extra" is not in env 0"#);
    let err = Schema::validate_envs(&[c, env(2)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"env 1: key "extra" is missing, but env 0 has it"#
    );
}

#[test]
fn envs_must_share_keys_and_the_first_difference_is_named() {
    let mut missing = cartpole();
    missing.remove(("next", "reward"));
    missing.remove("terminated");
    let err = Schema::validate_envs(&[cartpole(), cartpole(), missing.clone()]).unwrap_err();
    assert_eq!(
        err,
        SchemaError::EnvMissingKey {
            env: 2,
            key: key(("next", "reward"))
        }
    );
    assert_eq!(
        err.to_string(),
        r#"env 2: key ("next", "reward") is missing, but env 0 has it"#
    );
    let err = Schema::validate_envs(&[missing, cartpole()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"env 1: key ("next", "reward") is not in env 0"#
    );
    // A key past the end of env 0's keys.
    let mut extra = cartpole();
    extra.set("zzz", Tensor::zeros(DType::U8, &[1])).unwrap();
    let err = Schema::validate_envs(&[cartpole(), extra.clone()]).unwrap_err();
    assert_eq!(err.to_string(), r#"env 1: key "zzz" is not in env 0"#);
    let err = Schema::validate_envs(&[extra, cartpole()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"env 1: key "zzz" is missing, but env 0 has it"#
    );
}

#[test]
fn envs_must_share_shapes_and_dtypes() {
    let env = |n: usize, dtype: DType| {
        let mut td = cartpole();
        td.set(("next", "observation"), Tensor::zeros(dtype, &[n]))
            .unwrap();
        td
    };
    let envs = [
        env(4, DType::F32),
        env(4, DType::F32),
        env(4, DType::F32),
        env(3, DType::F32),
    ];
    let err = Schema::validate_envs(&envs).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"env 3: key ("next", "observation") has shape [3] but env 0 has [4]"#
    );
    let err = Schema::validate_envs(&[env(4, DType::F32), env(4, DType::F64)]).unwrap_err();
    assert_eq!(
        err,
        SchemaError::EnvDType {
            env: 1,
            key: key(("next", "observation")),
            dtype: DType::F64,
            expected: DType::F32
        }
    );
    assert_eq!(
        err.to_string(),
        r#"env 1: key ("next", "observation") has dtype f64 but env 0 has f32"#
    );
}

#[test]
fn check_accepts_a_matching_tensordict() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let mut td = cartpole();
    td.tensor_mut("observation")
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()[0] = 1.5;
    schema.check(&td).unwrap();
    // An empty sub-dict carries no data.
    td.set("empty", TensorDict::new(&[])).unwrap();
    schema.check(&td).unwrap();
}

#[test]
fn check_names_unknown_keys_and_points_to_the_queue_exchange() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let mut td = cartpole();
    td.set("env_index", NonTensor::Int(3)).unwrap();
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key "env_index" is not in the shared-memory schema; use the queue exchange for dynamic data"#
    );
    td.set(("next", "info"), Tensor::zeros(DType::F32, &[7]))
        .unwrap();
    // Unknown keys come first, even when keys are missing too.
    td.remove("action");
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err,
        SchemaError::UnknownKeys {
            keys: vec![key("env_index"), key(("next", "info"))]
        }
    );
    assert_eq!(
        err.to_string(),
        r#"keys ["env_index", ("next", "info")] are not in the shared-memory schema; use the queue exchange for dynamic data"#
    );
    // A sub-dict where the schema has a tensor: its leaves are unknown.
    let mut td = cartpole();
    td.remove("action");
    td.set(("action", "x"), Tensor::zeros(DType::I64, &[1]))
        .unwrap();
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err,
        SchemaError::UnknownKeys {
            keys: vec![key(("action", "x"))]
        }
    );
}

#[test]
fn check_names_missing_keys() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let mut td = cartpole();
    td.remove(("next", "reward"));
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key ("next", "reward") is missing from the tensordict; the shared-memory schema needs every one of its keys"#
    );
    td.remove("action");
    td.set(("next", "observation"), Tensor::zeros(DType::F64, &[4]))
        .unwrap();
    // Missing keys come before a dtype that differs.
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err,
        SchemaError::MissingKeys {
            keys: vec![key("action"), key(("next", "reward"))]
        }
    );
}

#[test]
fn check_names_a_wrong_batch_size_shape_dtype_or_kind() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let err = schema.check(&TensorDict::new(&[1])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the tensordict has batch size [1] but the shared-memory schema has []"
    );
    let mut td = cartpole();
    td.set("observation", Tensor::zeros(DType::F32, &[3]))
        .unwrap();
    td.set("action", Tensor::zeros(DType::I32, &[1])).unwrap();
    // The first key in order: "action".
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key "action" has dtype i32 but the shared-memory schema has i64"#
    );
    td.set("action", Tensor::zeros(DType::I64, &[1])).unwrap();
    let err = schema.check(&td).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key "observation" has shape [3] but the shared-memory schema has [4]"#
    );
    let mut td = cartpole();
    td.set("done", NonTensor::Bool(false)).unwrap();
    let err = schema.check(&td).unwrap_err();
    assert!(matches!(err, SchemaError::NonTensorLeaf { env: None, .. }));
    assert!(err
        .to_string()
        .starts_with(r#"key "done" holds a non-tensor value"#));
}

#[test]
fn fields_need_valid_keys_and_sizes_that_fit() {
    let err = Field::new(("next", ""), DType::F32, &[1]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key ("next", "") is not valid: a key needs at least one part and no empty part"#
    );
    assert!(matches!(
        Field::new(NestedKey::default(), DType::F32, &[1]),
        Err(SchemaError::InvalidKey { .. })
    ));
    let err = Field::new("big", DType::I64, &[usize::MAX / 4, 2]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            r#"key "big": shape [{}, 2] of i64 is too large"#,
            usize::MAX / 4
        )
    );
    // A zero dim makes any shape fit.
    assert_eq!(
        Field::new("none", DType::F64, &[0, usize::MAX])
            .unwrap()
            .nbytes(),
        0
    );
}

#[test]
fn schemas_from_fields_are_checked() {
    let f = |k: NestedKey, shape: &[usize]| Field::new(k, DType::U8, shape).unwrap();
    let err = Schema::new(&[], vec![f(key("a"), &[1]), f(key("a"), &[2])]).unwrap_err();
    assert_eq!(err.to_string(), r#"key "a" appears twice in the schema"#);
    let err = Schema::new(&[], vec![f(key(("a", "b")), &[1]), f(key("a"), &[2])]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"key "a" is both a tensor and a sub-dict"#
    );
    let err = Schema::new(&[2], vec![f(key(("a", "b")), &[3, 1])]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"entry ("a", "b") has shape [3, 1], whose leading dims are not the batch size [2] of the tensordict that holds it"#
    );
    let huge = usize::MAX / 2 + 1;
    let err = Schema::new(&[], vec![f(key("a"), &[huge]), f(key("b"), &[huge])]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the 2 fields of the schema add up to more bytes than usize holds"
    );
    // Fields given in any order come out sorted.
    let schema = Schema::new(&[], vec![f(key("b"), &[1]), f(key(("a", "z")), &[2])]).unwrap();
    assert_eq!(
        schema.keys().cloned().collect::<Vec<_>>(),
        [key(("a", "z")), key("b")]
    );
}

#[test]
fn decoding_reports_what_is_wrong() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let bytes = schema.encode();
    assert_eq!(Schema::decode(&bytes).unwrap(), schema);

    let mut bad = bytes.clone();
    bad[0] = b'X';
    let err = Schema::decode(&bad).unwrap_err();
    assert_eq!(err, SchemaDecodeError::BadMagic);
    assert_eq!(err.to_string(), "not a schema: bad magic bytes");

    let mut bad = bytes.clone();
    bad[4] = 9;
    assert_eq!(
        Schema::decode(&bad).unwrap_err().to_string(),
        "unsupported schema version 9 (this decoder reads version 2)"
    );

    assert_eq!(
        Schema::decode(&bytes[..7]).unwrap_err().to_string(),
        "truncated schema: batch size at byte 5 needs 4 bytes but 2 remain"
    );

    let mut extra = bytes.clone();
    extra.extend_from_slice(&[0, 0]);
    assert_eq!(
        Schema::decode(&extra).unwrap_err().to_string(),
        "2 trailing bytes after the schema"
    );

    // A one-field schema, built by hand.
    let one_flagged = |part: &[u8], tag: u8, flags: u8, ndim: u32| {
        let mut b = b"RLSC\x02".to_vec();
        b.extend_from_slice(&0u32.to_le_bytes()); // batch size []
        b.extend_from_slice(&0u32.to_le_bytes()); // no sub-dict
        b.extend_from_slice(&1u32.to_le_bytes()); // one field
        b.extend_from_slice(&1u32.to_le_bytes()); // one part
        b.extend_from_slice(&(part.len() as u32).to_le_bytes());
        b.extend_from_slice(part);
        b.push(tag);
        b.push(flags);
        b.extend_from_slice(&ndim.to_le_bytes());
        b
    };
    let one = |part: &[u8], tag: u8, ndim: u32| one_flagged(part, tag, 0, ndim);
    // Flags: 1 only on a u8 field of one dimension.
    assert_eq!(
        Schema::decode(&one_flagged(b"x", DType::U8.tag(), 2, 0))
            .unwrap_err()
            .to_string(),
        "field flags 2 at byte 27: 0, or 1 on a u8 field of one dimension"
    );
    assert!(matches!(
        Schema::decode(&one_flagged(b"x", DType::F32.tag(), 1, 0)),
        Err(SchemaDecodeError::FieldFlags { flags: 1, at: 27 })
    ));
    let ok = one(b"x", DType::F32.tag(), 0);
    assert_eq!(
        Schema::decode(&ok).unwrap(),
        Schema::new(&[], vec![Field::new("x", DType::F32, &[]).unwrap()]).unwrap()
    );
    assert_eq!(
        Schema::decode(&one(b"x", 42, 0)).unwrap_err().to_string(),
        "unknown dtype tag 42 at byte 26"
    );
    assert_eq!(
        Schema::decode(&one(b"\xff", 0, 0)).unwrap_err().to_string(),
        "invalid UTF-8 in a key part at byte 25"
    );
    let err = Schema::decode(&one(b"", 0, 0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"the decoded schema is invalid: key "" is not valid: a key needs at least one part and no empty part"#
    );
    assert!(matches!(
        err,
        SchemaDecodeError::Invalid(SchemaError::InvalidKey { .. })
    ));
    // A key deeper than any tensordict.
    let mut deep = b"RLSC\x02".to_vec();
    deep.extend_from_slice(&0u32.to_le_bytes()); // batch size []
    deep.extend_from_slice(&1u32.to_le_bytes()); // one sub-dict
    deep.extend_from_slice(&65u32.to_le_bytes()); // of 65 parts
    for _ in 0..65 {
        deep.extend_from_slice(&1u32.to_le_bytes());
        deep.push(b'a');
    }
    deep.extend_from_slice(&0u32.to_le_bytes()); // batch size []
    deep.extend_from_slice(&0u32.to_le_bytes()); // no field
    assert_eq!(
        Schema::decode(&deep).unwrap_err().to_string(),
        "key at byte 13 has 65 parts; a schema key has at most 64"
    );
    // A rank that the bytes cannot hold is refused before anything is
    // allocated for it.
    assert_eq!(
        Schema::decode(&one(b"x", 0, u32::MAX))
            .unwrap_err()
            .to_string(),
        "truncated schema: shape at byte 28 needs 34359738360 bytes but 0 remain"
    );
}

#[test]
fn every_truncation_of_an_encoding_is_an_error() {
    let schema = Schema::from_template(&cartpole()).unwrap();
    let bytes = schema.encode();
    for len in 0..bytes.len() {
        assert!(
            Schema::decode(&bytes[..len]).is_err(),
            "prefix of {len} bytes"
        );
    }
}

fn arb_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// Random templates: a few leaves under up to two levels of sub-dicts, some
/// of which have a longer batch size.
fn arb_template() -> impl Strategy<Value = TensorDict> {
    let leaf = (
        prop::collection::vec(prop::sample::select(vec!["a", "b", "obs", "next"]), 1..4),
        arb_dtype(),
        prop::collection::vec(0usize..4, 0..3),
    );
    (
        prop::collection::vec(0usize..3, 0..2),
        any::<bool>(),
        prop::collection::vec(leaf, 0..8),
    )
        .prop_map(|(batch, longer_next, leaves)| {
            let mut td = TensorDict::new(&batch);
            if longer_next {
                let next: Vec<usize> = batch.iter().copied().chain([2]).collect();
                td.set("next", TensorDict::new(&next)).unwrap();
            }
            for (parts, dtype, dims) in leaves {
                let shape: Vec<usize> = batch.iter().copied().chain(dims).collect();
                // Leaves that clash with earlier ones are skipped.
                let _ = td.set(parts.as_slice(), Tensor::zeros(dtype, &shape));
            }
            td
        })
}

proptest! {
    #[test]
    fn templates_round_trip_through_zeros_and_bytes(td in arb_template()) {
        let schema = Schema::from_template(&td).unwrap();
        prop_assert_eq!(&schema.zeros(), &td);
        prop_assert_eq!(&Schema::decode(&schema.encode()).unwrap(), &schema);
        prop_assert!(schema.check(&td).is_ok());
        prop_assert_eq!(
            schema.nbytes(),
            td.items(true, true).iter().map(|(_, e)| e.as_tensor().unwrap().nbytes()).sum::<usize>()
        );
        let validated = Schema::validate_envs(&[td.clone(), td.clone()]).unwrap();
        prop_assert_eq!(validated, schema);
    }

    #[test]
    fn decode_never_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Schema::decode(&bytes);
    }

    #[test]
    fn decode_never_panics_on_corrupted_encodings(
        td in arb_template(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = Schema::from_template(&td).unwrap().encode();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Ok(schema) = Schema::decode(&bytes) {
            // Whatever decodes is a valid schema: it encodes back to itself.
            prop_assert_eq!(Schema::decode(&schema.encode()).unwrap(), schema);
        }
    }
}

/// A length-prefixed field keeps its mark through an encoding, shows it,
/// and changes the fingerprint-relevant bytes; fields that cannot carry
/// the header are left as they are.
#[test]
fn sized_fields_round_trip() {
    let mut template = TensorDict::new(&[]);
    template
        .set("info", Tensor::zeros(DType::U8, &[20]))
        .unwrap();
    template
        .set("tiny", Tensor::zeros(DType::U8, &[3]))
        .unwrap();
    template
        .set("observation", Tensor::zeros(DType::F32, &[4]))
        .unwrap();
    let plain = Schema::from_template(&template).unwrap();
    let keys = [key("info"), key("tiny"), key("observation"), key("absent")];
    let sized = plain.clone().with_sized(&keys);
    let marked: Vec<bool> = sized.fields().iter().map(Field::is_sized).collect();
    // Sorted: info, observation, tiny.
    assert_eq!(marked, [true, false, false]);
    assert_ne!(sized, plain);
    assert_ne!(sized.encode(), plain.encode());
    assert_eq!(Schema::decode(&sized.encode()).unwrap(), sized);
    assert_eq!(
        sized.field("info").unwrap().to_string(),
        r#""info": u8[20], sized"#
    );
}
