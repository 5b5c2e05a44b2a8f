//! The `Env` contract on the reference envs and on deliberately broken
//! envs: `check_env_specs`, `rollout`, `step_mdp`, `step_and_maybe_reset`,
//! `fake_tensordict`, and the errors each path reports.

use envs::{check_env_specs, CountingEnv, Env, EnvError, EnvSpecs, Kwargs, Policy, Registry};
use rand::rngs::StdRng;
use rand::SeedableRng;
use specs::TensorSpec;
use tensordict::{DType, NestedKey, Tensor, TensorDict};

fn ones(td: &mut TensorDict) -> Result<(), EnvError> {
    td.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
    Ok(())
}

#[test]
fn every_reference_env_passes_check_env_specs() {
    let registry = Registry::with_reference_envs();
    for name in registry.names() {
        let mut env = registry.make(&name, &Kwargs::new()).unwrap();
        check_env_specs(&mut env, 300, 1).unwrap_or_else(|err| panic!("{name}: {err}"));
    }
}

#[test]
fn rollout_stops_at_the_first_done_or_resets_and_goes_on() {
    let mut env = CountingEnv::new(0, 2);
    let rollout = env.rollout(10, Policy::Fn(&mut ones), true).unwrap();
    assert_eq!(rollout.batch_size(), &[3]);
    assert_eq!(
        rollout
            .tensor(("next", "observation"))
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![1, 2, 3]
    );

    let rollout = env.rollout(7, Policy::Fn(&mut ones), false).unwrap();
    assert_eq!(rollout.batch_size(), &[7]);
    assert_eq!(
        rollout
            .tensor("observation")
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![0, 1, 2, 0, 1, 2, 0],
        "the root after a done step is the reset observation"
    );
    assert_eq!(
        rollout
            .tensor(("next", "done"))
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![false, false, true, false, false, true, false]
    );

    let empty = env.rollout(0, Policy::Fn(&mut ones), true).unwrap();
    assert_eq!(empty.batch_size(), &[0]);
}

#[test]
fn step_mdp_moves_next_to_the_root_and_keeps_other_entries() {
    let mut env = CountingEnv::new(0, 5);
    let mut td = env.reset(None).unwrap();
    td.set("env_index", tensordict::NonTensor::Int(3)).unwrap();
    ones(&mut td).unwrap();
    let out = env.step(td).unwrap();
    let root = env.step_mdp(&out).unwrap();
    let keys: Vec<String> = root
        .keys(true, true)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        keys,
        [
            r#""done""#,
            r#""env_index""#,
            r#""observation""#,
            r#""terminated""#,
            r#""truncated""#
        ]
    );
    assert_eq!(
        root.tensor("observation").unwrap().to_vec::<i32>().unwrap(),
        vec![1]
    );
    let err = env.step_mdp(&TensorDict::new(&[])).unwrap_err();
    assert!(matches!(err, EnvError::Data(_)));
    assert_eq!(err.to_string(), r#"key "next" not found; keys present: []"#);
}

#[test]
fn fake_tensordict_has_every_key_of_a_step() {
    let mut env = envs::make("CartPole-v1", &Kwargs::new()).unwrap();
    let fake = env.fake_tensordict();
    let mut rng = StdRng::seed_from_u64(0);
    let step = env.rand_step(None, &mut rng).unwrap();
    assert_eq!(fake.keys(true, true), step.keys(true, true));
    assert!(fake
        .tensor(("next", "reward"))
        .unwrap()
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .all(|&r| r == 0.0));
}

/// An env whose outputs break its specs in a chosen way.
struct Broken {
    specs: EnvSpecs,
    fault: &'static str,
}

impl Broken {
    fn new(fault: &'static str) -> Broken {
        Broken {
            specs: EnvSpecs::standard(
                TensorSpec::categorical(&[1], DType::I64, 2).unwrap(),
                TensorSpec::bounded(&[2], DType::F32, -1.0, 1.0).unwrap(),
            )
            .unwrap(),
            fault,
        }
    }
}

impl Env for Broken {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }
    fn set_seed(&mut self, _seed: u64) {}
    fn name(&self) -> &str {
        "Broken"
    }
    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        _out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        if self.fault == "reset fails" {
            return Err(EnvError::failed("Broken", "the simulator did not start"));
        }
        Ok(())
    }
    fn step_into(&mut self, _input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        match self.fault {
            "observation out of bounds" => {
                next.tensor_mut("observation")?.as_mut_slice::<f32>()?[1] = 3.0;
            }
            "done without terminated" => {
                next.tensor_mut("done")?.as_mut_slice::<bool>()?[0] = true;
            }
            "extra key" => {
                next.set("extra", Tensor::scalar(1u8))?;
            }
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn check_env_specs_names_the_step_and_key_that_break_the_specs() {
    let err = check_env_specs(&mut Broken::new("observation out of bounds"), 5, 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"spec check failed at step 0, key ("next", "observation"): value at key "observation" is out of bounds: element 1 is 3, outside [-1, 1]"#
    );
    let err = check_env_specs(&mut Broken::new("done without terminated"), 5, 0).unwrap_err();
    assert!(
        matches!(&err, EnvError::SpecCheck { step: 0, key, .. } if *key == NestedKey::from(("next", "done"))),
        "{err}"
    );
    assert!(
        err.to_string().contains("is not the or of terminated"),
        "{err}"
    );
    let err = check_env_specs(&mut Broken::new("extra key"), 5, 0).unwrap_err();
    assert!(
        err.to_string()
            .contains("unexpected [(\"next\", \"extra\")]"),
        "{err}"
    );
    check_env_specs(&mut Broken::new("none"), 5, 0).unwrap();
}

#[test]
fn an_env_failure_carries_its_message() {
    let mut env = Broken::new("reset fails");
    let err = env.reset(None).unwrap_err();
    assert_eq!(err.to_string(), "Broken: the simulator did not start");
    let err = env.rollout(3, Policy::Fn(&mut ones), true).unwrap_err();
    assert!(matches!(err, EnvError::Failed { .. }));
}

#[test]
fn spec_errors_convert_into_env_errors() {
    let err: EnvError = TensorSpec::categorical(&[1], DType::I64, 0)
        .unwrap_err()
        .into();
    assert!(matches!(err, EnvError::Spec(_)));
    assert!(err.to_string().contains("categorical"), "{err}");
}

#[test]
fn step_and_maybe_reset_resets_exactly_when_done() {
    let mut env = CountingEnv::new(10, 11);
    let mut root = env.reset(None).unwrap();
    let mut observed = Vec::new();
    for _ in 0..6 {
        ones(&mut root).unwrap();
        let (out, next_root) = env.step_and_maybe_reset(root).unwrap();
        observed.push((
            out.tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap()[0],
            next_root
                .tensor("observation")
                .unwrap()
                .to_vec::<i32>()
                .unwrap()[0],
        ));
        root = next_root;
    }
    // Done once the count passes 11: at 12, and the next root is 10 again.
    assert_eq!(
        observed,
        [(11, 11), (12, 10), (11, 11), (12, 10), (11, 11), (12, 10)]
    );
}

/// Two counters in one env (batch size [2]); done past 1.
struct TwoCounters {
    counts: [i32; 2],
    specs: EnvSpecs,
}

impl TwoCounters {
    fn new() -> TwoCounters {
        let batch = [2];
        let composite =
            |key: &str, spec: TensorSpec| specs::Composite::new(&batch).with(key, spec).unwrap();
        TwoCounters {
            counts: [0, 0],
            specs: EnvSpecs::new(
                &batch,
                composite("action", TensorSpec::binary(&[2, 1], DType::I64).unwrap()),
                composite("observation", TensorSpec::unbounded(&[2, 1], DType::I32)),
                composite("reward", TensorSpec::unbounded(&[2, 1], DType::F32)),
                envs::standard_done_spec(&batch).unwrap(),
                specs::Composite::new(&batch),
            )
            .unwrap(),
        }
    }

    fn write(&self, td: &mut TensorDict) -> Result<(), EnvError> {
        td.tensor_mut("observation")?
            .as_mut_slice::<i32>()?
            .copy_from_slice(&self.counts);
        let done = self.counts.map(|c| c > 1);
        td.tensor_mut("done")?
            .as_mut_slice::<bool>()?
            .copy_from_slice(&done);
        td.tensor_mut("terminated")?
            .as_mut_slice::<bool>()?
            .copy_from_slice(&done);
        Ok(())
    }
}

impl Env for TwoCounters {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }
    fn set_seed(&mut self, _seed: u64) {}
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        let mask = match input.and_then(|td| td.tensor("_reset").ok()) {
            Some(mask) => mask.to_vec::<bool>()?,
            None => vec![true, true],
        };
        for (count, reset) in self.counts.iter_mut().zip(mask) {
            if reset {
                *count = 0;
            }
        }
        self.write(out)
    }
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        let action = input.tensor("action")?.to_vec::<i64>()?;
        for (count, a) in self.counts.iter_mut().zip(action) {
            *count += a as i32;
        }
        self.write(next)
    }
}

#[test]
fn a_batched_env_resets_only_the_rows_that_are_done() {
    let mut env = TwoCounters::new();
    check_env_specs(&mut env, 10, 0).unwrap();
    let mut root = env.reset(None).unwrap();
    // Row 0 counts every step, row 1 only the first: row 0 is done at 2 and
    // reset, row 1 keeps its count.
    let mut seen = Vec::new();
    for actions in [[1i64, 1], [1, 0], [1, 0]] {
        root.set(
            "action",
            Tensor::from_vec(&[2, 1], actions.to_vec()).unwrap(),
        )
        .unwrap();
        let (_, next_root) = env.step_and_maybe_reset(root).unwrap();
        seen.push(
            next_root
                .tensor("observation")
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
        );
        root = next_root;
    }
    assert_eq!(seen, [vec![1, 1], vec![0, 1], vec![1, 1]]);
}
