//! The raw step cost of each reference env: `step_into` on reused buffers
//! (what a pool pays per env-step), and the provided `step` that allocates a
//! fresh `"next"` tensordict.

use divan::{black_box, Bencher};
use envs::{Env, Kwargs};
use tensordict::{Tensor, TensorDict};

fn main() {
    divan::main();
}

const ENVS: &[&str] = &["CartPole-v1", "Pendulum-v1", "CountingEnv", "LatencyEnv"];

/// An env built by name, its reset root with a fixed valid action, and a
/// step buffer.
fn setup(name: &str) -> (Box<dyn Env>, TensorDict, TensorDict) {
    let mut env = envs::make(name, &Kwargs::new()).expect("a reference env");
    let mut root = env.reset(None).expect("reset");
    let action = if name == "Pendulum-v1" {
        Tensor::from_vec(&[1], vec![0.5f32]).expect("one value")
    } else {
        Tensor::from_vec(&[1], vec![1i64]).expect("one value")
    };
    root.set("action", action).expect("batch size []");
    let next = env.step_template();
    (env, root, next)
}

/// `step_into` on reused buffers; resets on done so episodes never end.
#[divan::bench(args = ENVS)]
fn step_into(bencher: Bencher<'_, '_>, name: &str) {
    let (mut env, mut root, mut next) = setup(name);
    bencher.bench_local(|| {
        env.step_into(black_box(&root), &mut next).expect("step");
        if next
            .tensor("done")
            .expect("done")
            .as_slice::<bool>()
            .expect("bool")[0]
        {
            env.reset_into(None, &mut root).expect("reset");
        }
    });
}

/// The provided `step`: clones the root and allocates the `"next"` result.
#[divan::bench(args = ENVS)]
fn step_allocating(bencher: Bencher<'_, '_>, name: &str) {
    let (mut env, root, _) = setup(name);
    bencher.bench_local(|| {
        let out = env.step(black_box(root.clone())).expect("step");
        if out
            .tensor(("next", "done"))
            .expect("done")
            .as_slice::<bool>()
            .expect("bool")[0]
        {
            env.reset(None).expect("reset");
        }
        out
    });
}
