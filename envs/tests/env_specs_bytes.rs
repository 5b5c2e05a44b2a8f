//! `EnvSpecs::to_bytes` / `from_bytes`, as a worker process and its parent
//! use them: the specs of every reference env (made by registry name) and
//! of batched envs (dense and lazy stacks) round-trip; garbage, truncated
//! and corrupted bytes are errors, never panics.

use envs::{EnvError, EnvSpecs, Kwargs};
use specs::{Composite, SpecError, TensorSpec};
use tensordict::DType;

fn specs_of(name: &str, kwargs: &Kwargs) -> EnvSpecs {
    envs::make(name, kwargs)
        .unwrap_or_else(|err| panic!("{name}: {err}"))
        .specs()
        .clone()
}

/// The specs of these envs (of one batch size) stacked along a new leading
/// batch dim: each composite stacked lazily (dense where the envs agree).
fn batched(envs: &[EnvSpecs]) -> EnvSpecs {
    let stack = |get: fn(&EnvSpecs) -> &Composite| -> Composite {
        let parts = envs.iter().map(|e| get(e).clone().into()).collect();
        match TensorSpec::lazy_stack(parts).unwrap() {
            TensorSpec::Composite(c) => c,
            other => panic!("a stack of composites of one key set is a composite: {other}"),
        }
    };
    let mut batch_size = vec![envs.len()];
    batch_size.extend_from_slice(envs[0].batch_size());
    EnvSpecs::new(
        &batch_size,
        stack(EnvSpecs::full_action_spec),
        stack(EnvSpecs::full_observation_spec),
        stack(EnvSpecs::full_reward_spec),
        stack(EnvSpecs::full_done_spec),
        stack(EnvSpecs::full_state_spec),
    )
    .unwrap()
}

fn round_trips(what: &str, specs: &EnvSpecs) {
    let bytes = specs.to_bytes();
    let back = EnvSpecs::from_bytes(&bytes).unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_eq!(&back, specs, "{what}");
    assert_eq!(back.to_bytes(), bytes, "{what}");
}

#[test]
fn reference_env_specs_round_trip() {
    for name in ["CartPole-v1", "Pendulum-v1", "CountingEnv", "LatencyEnv"] {
        round_trips(name, &specs_of(name, &Kwargs::new()));
    }
    // Kwargs that change the specs.
    round_trips(
        "LatencyEnv obs_dim=7",
        &specs_of("LatencyEnv", &Kwargs::new().with("obs_dim", 7)),
    );
}

#[test]
fn batched_env_specs_round_trip() {
    // Dense: three CartPoles.
    let cartpole = specs_of("CartPole-v1", &Kwargs::new());
    let dense = batched(&[cartpole.clone(), cartpole.clone(), cartpole]);
    assert_eq!(dense.batch_size(), &[3]);
    assert_eq!(
        dense.full_action_spec().spec("action").unwrap().kind(),
        "categorical"
    );
    round_trips("3 x CartPole-v1", &dense);

    // Lazy: two envs whose action bounds differ keep a stacked spec.
    let env = |high: f64| {
        EnvSpecs::standard(
            TensorSpec::bounded(&[1], DType::F32, -high, high).unwrap(),
            TensorSpec::unbounded(&[3], DType::F32),
        )
        .unwrap()
    };
    let lazy = batched(&[env(1.0), env(2.0)]);
    assert_eq!(
        lazy.full_action_spec().spec("action").unwrap().kind(),
        "stacked"
    );
    round_trips("lazy stack of two bounds", &lazy);

    // Nested batch dims.
    let nested = batched(&[lazy.clone(), lazy]);
    assert_eq!(nested.batch_size(), &[2, 2]);
    round_trips("2 x 2 envs", &nested);
}

#[test]
fn garbage_bytes_are_errors() {
    for bytes in [
        &b""[..],
        b"garbage",
        b"RLTD\x01",
        b"S\x01",
        b"S\x01\x07",
        &[0xFF; 64],
    ] {
        let err = EnvSpecs::from_bytes(bytes).unwrap_err();
        match &err {
            EnvError::DecodeSpecs { len, source } => {
                assert_eq!(*len, bytes.len());
                assert!(matches!(**source, SpecError::Decode { .. }), "{source:?}");
            }
            other => panic!("{bytes:?}: {other:?}"),
        }
        assert!(
            err.to_string().starts_with("cannot decode env specs from "),
            "{err}"
        );
    }
    // Kwargs bytes (a tensordict message) are not specs.
    let kwargs = Kwargs::new().with("seed", 3).to_bytes();
    let err = EnvSpecs::from_bytes(&kwargs).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a spec message: the first byte is 0x52, not 0x53 ('S')"),
        "{err}"
    );
}

#[test]
fn truncated_and_corrupted_bytes_are_errors_not_panics() {
    let specs = specs_of("Pendulum-v1", &Kwargs::new());
    let bytes = specs.to_bytes();
    for len in 0..bytes.len() {
        assert!(
            EnvSpecs::from_bytes(&bytes[..len]).is_err(),
            "a prefix of {len} bytes decoded"
        );
    }
    // Every single-bit flip: an error, or specs (a flipped bound, say)
    // that `EnvSpecs::new` accepts and that encode to those bytes.
    for at in 0..bytes.len() {
        for bit in 0..8 {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1 << bit;
            if let Ok(back) = EnvSpecs::from_bytes(&flipped) {
                assert_eq!(back.to_bytes(), flipped, "byte {at}, bit {bit}");
            }
        }
    }
}
