//! Fuzz targets of every decoder that reads bytes from another process or
//! from a user, and the seeds of their corpus.
//!
//! Each target is a function of the fuzzer's bytes that panics when a
//! decoder misbehaves: the decoders themselves must return errors, never
//! panic, and a value they accept must encode again to bytes that decode
//! to the same encoding (for the control socket's messages and the
//! tensordict codec, to the very bytes read). The binaries in
//! `fuzz_targets/` run them under libFuzzer (`cargo xtask fuzz`, which
//! builds them with the coverage flags of the stable compiler); the test
//! `tests/corpus.rs` replays the committed corpus (`corpus/<target>/`)
//! through the same functions in `cargo test`. Each binary, and the replay,
//! installs [`CappedAlloc`], so that a decoder that allocates for a count
//! it has not checked is a crash, not a slow run.
//!
//! Regenerate the seeds (`seed-*` files) after an encoding changes with
//! `cargo run -p fuzz --example write_seeds`.
#![deny(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

use envs::{EnvSpecs, Kwargs, Policy};
use exchange::Schema;
use rand::SeedableRng;
use specs::{Composite, StackedSpec, TensorSpec};
use tensordict::{DType, NonTensor, Tensor, TensorDict};

/// A fuzz target: its name (its binary and its corpus folder) and its
/// function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name of the binary and of the folder `corpus/<name>`.
    pub name: &'static str,
    /// Runs one input; panics on a failure.
    pub run: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "tensordict",
        run: tensordict,
    },
    Target {
        name: "spec",
        run: spec,
    },
    Target {
        name: "env_specs",
        run: env_specs,
    },
    Target {
        name: "kwargs",
        run: kwargs,
    },
    Target {
        name: "schema",
        run: schema,
    },
    Target {
        name: "to_worker",
        run: to_worker,
    },
    Target {
        name: "from_worker",
        run: from_worker,
    },
    Target {
        name: "frames",
        run: frames,
    },
];

/// The largest single allocation a target may make: far above what any
/// input the fuzzer makes (at most 64 KiB, `cargo xtask fuzz`) justifies.
pub const MAX_ALLOCATION: usize = 64 << 20;

/// The system allocator, refusing any allocation over [`MAX_ALLOCATION`]
/// bytes (the program then aborts with "memory allocation of N bytes
/// failed", which the fuzzer reports as a crash).
#[derive(Debug)]
pub struct CappedAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments,
// or returns null for a refused allocation, which `GlobalAlloc` allows.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc_zeroed` is `System`'s.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (through this allocator) with
        // `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with `layout`, and `new_size`
        // is valid, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// `tensordict::decode`: a tensordict it accepts encodes to the bytes read.
pub fn tensordict(data: &[u8]) {
    if let Ok(td) = tensordict::decode(data) {
        let again = tensordict::encode(&td);
        assert!(again == data, "decode then encode changed the bytes");
    }
}

/// `TensorSpec::decode`: a spec it accepts encodes to bytes that decode,
/// and whose spec encodes to the same bytes.
pub fn spec(data: &[u8]) {
    if let Ok(spec) = TensorSpec::decode(data) {
        let first = spec.encode();
        let again = TensorSpec::decode(&first)
            .unwrap_or_else(|err| panic!("a decoded spec's encoding does not decode: {err}"));
        assert!(again.encode() == first, "the encoding is not stable");
    }
}

/// `EnvSpecs::from_bytes`, with the property of [`spec`].
pub fn env_specs(data: &[u8]) {
    if let Ok(specs) = EnvSpecs::from_bytes(data) {
        let first = specs.to_bytes();
        let again = EnvSpecs::from_bytes(&first)
            .unwrap_or_else(|err| panic!("decoded specs' encoding does not decode: {err}"));
        assert!(again.to_bytes() == first, "the encoding is not stable");
    }
}

/// `Kwargs::from_bytes`, with the property of [`spec`].
pub fn kwargs(data: &[u8]) {
    if let Ok(kwargs) = Kwargs::from_bytes(data) {
        let first = kwargs.to_bytes();
        let again = Kwargs::from_bytes(&first)
            .unwrap_or_else(|err| panic!("decoded kwargs' encoding does not decode: {err}"));
        assert!(again.to_bytes() == first, "the encoding is not stable");
    }
}

/// `exchange::Schema::decode`, with the property of [`spec`].
pub fn schema(data: &[u8]) {
    if let Ok(schema) = Schema::decode(data) {
        let first = schema.encode();
        let again = Schema::decode(&first)
            .unwrap_or_else(|err| panic!("a decoded schema's encoding does not decode: {err}"));
        assert!(again.encode() == first, "the encoding is not stable");
    }
}

/// The parent's messages to a worker: one it accepts encodes to the bytes
/// read.
pub fn to_worker(data: &[u8]) {
    if let Some(again) = pool_proc::fuzzing::to_worker(data) {
        assert!(again == data, "decode then encode changed the bytes");
    }
}

/// A worker's messages to the parent: one it accepts encodes to the bytes
/// read.
pub fn from_worker(data: &[u8]) {
    if let Some(again) = pool_proc::fuzzing::from_worker(data) {
        assert!(again == data, "decode then encode changed the bytes");
    }
}

/// The control socket's framing: the frames read from a stream, framed
/// again, are the stream (or, when the reading stopped on an error, its
/// beginning); each frame goes through both message decoders.
pub fn frames(data: &[u8]) {
    let (frames, end) = pool_proc::fuzzing::read_frames(data);
    let mut again = Vec::with_capacity(data.len());
    for frame in &frames {
        again.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        again.extend_from_slice(frame);
        let _ = pool_proc::fuzzing::to_worker(frame);
        let _ = pool_proc::fuzzing::from_worker(frame);
    }
    match end {
        None => assert!(again == data, "the frames read are not the stream"),
        Some(_) => assert!(
            data.starts_with(&again) && again.len() < data.len(),
            "the frames read before an error are not a prefix of the stream"
        ),
    }
}

/// A seed of a target's corpus, made from real encodings.
#[derive(Clone, Debug)]
pub struct Seed {
    /// The target.
    pub target: &'static str,
    /// The file's name in `corpus/<target>/` (`seed-...`).
    pub name: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// The seeds of every target: CartPole's and Pendulum's step, reset and
/// rollout tensordicts and specs, a spec of every kind, keyword arguments,
/// slot schemas, and every control-socket message (a CartPole's on either
/// exchange), alone and framed.
pub fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut add = |target: &'static str, name: &str, bytes: Vec<u8>| {
        seeds.push(Seed {
            target,
            name: format!("seed-{name}"),
            bytes,
        })
    };

    // Tensordicts: a CartPole step, reset and 3-step rollout, a Pendulum
    // step, and a dict with every kind of non-tensor value.
    let mut cartpole =
        envs::make("CartPole-v1", &Kwargs::new().with("seed", 0)).expect("CartPole-v1");
    let reset = cartpole.reset(None).expect("CartPole resets");
    let mut step = reset.clone();
    step.set("action", Tensor::from_vec(&[1], vec![1i64]).expect("shape"))
        .expect("action");
    let step = cartpole.step(step).expect("CartPole steps");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let rollout = cartpole
        .rollout(3, Policy::Random(&mut rng), true)
        .expect("CartPole rolls out");
    let mut pendulum = envs::make("Pendulum-v1", &Kwargs::new()).expect("Pendulum-v1");
    let pendulum_step = pendulum.rand_step(None, &mut rng).expect("Pendulum steps");
    let mut values = TensorDict::new(&[2]);
    values
        .set(
            "env_index",
            NonTensor::Stack(vec![NonTensor::Int(0), NonTensor::Int(5)].into()),
        )
        .expect("a stack of 2 fits batch size [2]");
    let mut inner = TensorDict::new(&[2, 1]);
    inner
        .set("mask", Tensor::full(&[2, 1, 3], true))
        .expect("fits");
    inner
        .set(
            "text",
            NonTensor::Stack(
                vec![
                    NonTensor::Stack(vec![NonTensor::Str("é".into())].into()),
                    NonTensor::Stack(vec![NonTensor::Float(0.5)].into()),
                ]
                .into(),
            ),
        )
        .expect("fits");
    values.set("inner", inner).expect("fits");
    values.set("u8", Tensor::full(&[2, 4], 7u8)).expect("fits");
    for (name, td) in [
        ("cartpole-reset", &reset),
        ("cartpole-step", &step),
        ("cartpole-rollout", &rollout),
        ("pendulum-step", &pendulum_step),
        ("values", &values),
    ] {
        add("tensordict", name, tensordict::encode(td));
    }

    // Specs: CartPole's and Pendulum's whole specs, and one of each kind.
    for (name, env) in [("cartpole", &cartpole), ("pendulum", &pendulum)] {
        add("spec", name, env.specs().to_bytes());
        add("env_specs", name, env.specs().to_bytes());
    }
    for name in ["CountingEnv", "LatencyEnv"] {
        let env = envs::make(name, &Kwargs::new()).expect("a reference env");
        add("env_specs", &name.to_lowercase(), env.specs().to_bytes());
    }
    add("spec", "every-kind", every_kind().encode());

    // Keyword arguments.
    let lists = Kwargs::new()
        .with("", "empty key")
        .with("p", 0.25)
        .with("on", true)
        .with("sizes", envs::KwValue::List(vec![1.into(), 2.into()]));
    for (name, kwargs) in [
        ("empty", Kwargs::new()),
        (
            "cartpole",
            Kwargs::new().with("seed", 7).with("max_episode_steps", 500),
        ),
        ("every-kind", lists),
    ] {
        add("kwargs", name, kwargs.to_bytes());
    }

    // Slot schemas of CartPole's buffers and of the dict of values' tensors.
    let runner = pool_core::Runner::new(&*cartpole);
    for (name, td) in [
        ("cartpole-input", &runner.input),
        ("cartpole-next", &runner.next),
        ("cartpole-root", &runner.root),
        ("cartpole-rollout", &rollout),
    ] {
        let schema = Schema::from_template(td).expect("CartPole's buffers fit slots");
        add("schema", name, schema.encode());
    }

    // The control socket's messages, alone and as streams of frames.
    let (to, from) = pool_proc::fuzzing::sample_messages();
    for (target, messages) in [("to_worker", &to), ("from_worker", &from)] {
        let mut stream = Vec::new();
        for (name, bytes) in messages {
            add(target, name, bytes.clone());
            stream.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            stream.extend_from_slice(bytes);
        }
        add("frames", target, stream);
    }
    seeds
}

/// A composite with a spec of every kind (the spec codec's own test's).
fn every_kind() -> TensorSpec {
    let low = Tensor::from_vec(&[2], vec![-1.0f64, 0.5]).expect("shape");
    let high = Tensor::from_vec(&[2], vec![1.0f64, f64::INFINITY]).expect("shape");
    let build = || -> Result<TensorSpec, specs::SpecError> {
        let env = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[3], DType::F32))?
            .with("action", TensorSpec::bounded(&[1], DType::I16, -3.0, 3.0)?)?;
        let other = env
            .clone()
            .with("obs", TensorSpec::unbounded(&[4], DType::F32))?;
        let lazy = TensorSpec::lazy_stack(vec![env.clone().into(), other.into()])?;
        let dense = TensorSpec::from(Composite::stack(&[env.clone(), env])?);
        Ok(Composite::new(&[])
            .with("unbounded", TensorSpec::unbounded(&[2, 0], DType::U8))?
            .with("bounded", TensorSpec::bounded_tensors(low, high)?)?
            .with(
                "categorical",
                TensorSpec::categorical(&[1], DType::I64, i64::MAX)?,
            )?
            .with("one_hot", TensorSpec::one_hot(&[2, 5], DType::Bool)?)?
            .with("binary", TensorSpec::binary(&[], DType::I8)?)?
            .with(
                "multi",
                TensorSpec::multi_categorical(&[4, 2], DType::I32, vec![3, 7])?,
            )?
            .with("text", TensorSpec::non_tensor(&[2]))?
            .with(("nested", "é key"), TensorSpec::non_tensor(&[]))?
            .with("dense", dense)?
            .with("lazy", lazy)?
            .with(
                "parts",
                StackedSpec::new(vec![
                    TensorSpec::non_tensor(&[]),
                    Composite::new(&[3]).into(),
                ])?
                .into(),
            )?
            .into())
    };
    build().expect("every kind of spec builds")
}
