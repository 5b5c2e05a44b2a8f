//! Benchmarks of tensordict's hot paths (stack, unbind, encode, decode,
//! clone and writes) for a CartPole-sized and an Atari-sized step.
//!
//! Run with `cargo bench -p tensordict`; `cargo bench -p tensordict -- --test`
//! runs each benchmark once.

use std::fmt;

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use tensordict::{decode, encode, encode_into, Element, Tensor, TensorDict};

fn main() {
    divan::main();
}

/// `n` values of type `T` that differ from step to step.
fn values<T: Element>(n: usize, seed: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(((i * 31 + seed * 7) % 251) as f64))
        .collect()
}

fn tensor<T: Element>(shape: &[usize], seed: usize) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, values::<T>(n, seed)).expect("values fill the shape")
}

/// The entries every step has besides its observations: the action, the
/// done flags at the root and under `next`, and the reward.
fn step_without_observations(seed: usize) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set("action", tensor::<i64>(&[1], seed)).unwrap();
    for flag in ["done", "terminated", "truncated"] {
        td.set(flag, tensor::<bool>(&[1], seed)).unwrap();
        td.set(("next", flag), tensor::<bool>(&[1], seed + 1))
            .unwrap();
    }
    td.set(("next", "reward"), tensor::<f32>(&[1], seed))
        .unwrap();
    td
}

/// The shape of a CartPole observation.
const CARTPOLE_OBS: [usize; 1] = [4];
/// The shape of an Atari observation: 4 stacked 84x84 frames.
const ATARI_OBS: [usize; 3] = [84, 84, 4];

/// A CartPole step: observation f32 [4], action i64 [1], done flags bool
/// [1], and under `next` the observation, reward f32 [1] and done flags.
fn cartpole_step(seed: usize) -> TensorDict {
    let mut td = step_without_observations(seed);
    td.set("observation", tensor::<f32>(&CARTPOLE_OBS, seed))
        .unwrap();
    td.set(
        ("next", "observation"),
        tensor::<f32>(&CARTPOLE_OBS, seed + 1),
    )
    .unwrap();
    td
}

/// An Atari step: as CartPole's, with observations u8 [84, 84, 4].
fn atari_step(seed: usize) -> TensorDict {
    let mut td = step_without_observations(seed);
    td.set("observation", tensor::<u8>(&ATARI_OBS, seed))
        .unwrap();
    td.set(("next", "observation"), tensor::<u8>(&ATARI_OBS, seed + 1))
        .unwrap();
    td
}

/// What the codec and clone benchmarks work on.
#[derive(Clone, Copy, Debug)]
enum Input {
    /// One step (batch size `[]`).
    Step,
    /// Eight steps stacked (batch size `[8]`).
    Batch8,
}

impl Input {
    fn build(self, step: fn(usize) -> TensorDict) -> TensorDict {
        match self {
            Input::Step => step(0),
            Input::Batch8 => {
                let parts: Vec<TensorDict> = (0..8).map(step).collect();
                TensorDict::stack(&parts).unwrap()
            }
        }
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Input::Step => "step",
            Input::Batch8 => "batch_8",
        })
    }
}

/// The benchmarks of one kind of step, written once for both: `$step`
/// builds a step from a seed, `$obs` is its observation's element type and
/// `$obs_shape` its shape.
macro_rules! step_benches {
    ($step:path, $obs:ty, $obs_shape:expr) => {
        use super::*;

        /// Dense stack of `n` steps (copies every tensor).
        #[divan::bench(args = [8, 64])]
        fn stack(bencher: Bencher<'_, '_>, n: usize) {
            let parts: Vec<TensorDict> = (0..n).map($step).collect();
            bencher
                .counter(ItemsCount::new(n))
                .bench(|| TensorDict::stack(black_box(&parts)).unwrap());
        }

        /// Unbind of a stacked batch of `n` steps (views, no copy).
        #[divan::bench(args = [8, 64])]
        fn unbind(bencher: Bencher<'_, '_>, n: usize) {
            let parts: Vec<TensorDict> = (0..n).map($step).collect();
            let batch = TensorDict::stack(&parts).unwrap();
            bencher
                .counter(ItemsCount::new(n))
                .bench(|| black_box(&batch).unbind().unwrap());
        }

        /// `encode` into a new buffer.
        #[divan::bench(args = [Input::Step, Input::Batch8])]
        fn encode(bencher: Bencher<'_, '_>, input: Input) {
            let td = input.build($step);
            bencher
                .counter(BytesCount::new(super::encode(&td).len()))
                .bench(|| super::encode(black_box(&td)));
        }

        /// `encode_into` a reused buffer: the steady state of a sender.
        #[divan::bench(args = [Input::Step, Input::Batch8])]
        fn encode_into(bencher: Bencher<'_, '_>, input: Input) {
            let td = input.build($step);
            let mut buf = Vec::new();
            super::encode_into(&td, &mut buf);
            bencher.counter(BytesCount::new(buf.len())).bench_local(|| {
                buf.clear();
                super::encode_into(black_box(&td), &mut buf);
                black_box(buf.len());
            });
        }

        /// `decode` of an encoded message.
        #[divan::bench(args = [Input::Step, Input::Batch8])]
        fn decode(bencher: Bencher<'_, '_>, input: Input) {
            let bytes = super::encode(&input.build($step));
            bencher
                .counter(BytesCount::new(bytes.len()))
                .bench(|| super::decode(black_box(&bytes)).unwrap());
        }

        /// `clone` (tensors share storage: no element is copied).
        #[divan::bench(args = [Input::Step, Input::Batch8])]
        fn clone(bencher: Bencher<'_, '_>, input: Input) {
            let td = input.build($step);
            bencher.bench(|| black_box(&td).clone());
        }

        /// The hot-path writes of an observation into an existing step.
        mod write {
            use super::*;

            /// One observation value written in place through `tensor_mut`.
            #[divan::bench]
            fn tensor_mut(bencher: Bencher<'_, '_>) {
                let mut td = $step(0);
                let value = <$obs as Element>::from_f64(1.0);
                bencher.bench_local(|| {
                    let mut obs = td.tensor_mut(black_box("observation")).unwrap();
                    obs.as_mut_slice::<$obs>().unwrap()[0] = black_box(value);
                });
            }

            /// A whole observation copied in place through `tensor_mut`.
            #[divan::bench]
            fn copy_from(bencher: Bencher<'_, '_>) {
                let mut td = $step(0);
                let new_obs = tensor::<$obs>(&$obs_shape, 1);
                bencher
                    .counter(BytesCount::new(new_obs.nbytes()))
                    .bench_local(|| {
                        td.tensor_mut(black_box("observation"))
                            .unwrap()
                            .copy_from(black_box(&new_obs))
                            .unwrap();
                    });
            }

            /// A whole observation replaced by `set` (the tensor is shared,
            /// not copied).
            #[divan::bench]
            fn set(bencher: Bencher<'_, '_>) {
                let mut td = $step(0);
                let new_obs = tensor::<$obs>(&$obs_shape, 1);
                bencher.bench_local(|| {
                    td.set(black_box("observation"), black_box(&new_obs).clone())
                        .unwrap();
                });
            }
        }
    };
}

/// CartPole-sized steps: eight small tensors.
mod cartpole {
    step_benches!(super::cartpole_step, f32, super::CARTPOLE_OBS);
}

/// Atari-sized steps: two 28 KB observations.
mod atari {
    step_benches!(super::atari_step, u8, super::ATARI_OBS);
}
