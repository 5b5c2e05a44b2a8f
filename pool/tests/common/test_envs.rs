//! Test envs for the pool's failure paths: `FaultyCounter`, a CountingEnv
//! that panics, returns an error, hangs, aborts its process or is slow at a
//! given step (or fails at a given reset), registered by name so that any
//! backend can build it.

use std::sync::Once;

use pool::envs::{CountingEnv, Env, EnvError, EnvSpecs, Kwargs};
use pool::specs::TensorSpec;
use pool::tensordict::{DType, TensorDict};

/// The registry name of [`FaultyCounter`].
pub(crate) const FAULTY: &str = "FaultyCounter";

/// How a [`FaultyCounter`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `step_into` panics.
    Panic,
    /// `step_into` returns `EnvError::failed`.
    Error,
    /// `step_into` does not return for an hour: a process pool's shutdown
    /// kills its worker, a thread pool's leaves its thread behind.
    Hang,
    /// `step_into` aborts the process (`std::process::abort`): for
    /// process pools only.
    Abort,
    /// `step_into` sleeps ten times `step_us` (the other steps sleep
    /// `step_us`), then counts as usual.
    Slow,
    /// `reset_into` returns `EnvError::failed` at the `fail_at`-th reset
    /// call (steps never fail).
    ErrorOnReset,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Panic => "panic",
            Fault::Error => "error",
            Fault::Hang => "hang",
            Fault::Abort => "abort",
            Fault::Slow => "slow",
            Fault::ErrorOnReset => "error_on_reset",
        }
    }
}

/// A [`CountingEnv`] whose `fail_at`-th step call (counted from 1 since the
/// env was built; 0: never) fails without counting; every other call counts
/// as CountingEnv does. Keywords: `start_val`, `max_steps` (as CountingEnv),
/// `fail_at` (default 0), `fault` (`"panic"`, `"error"`, `"hang"`,
/// `"abort"`, `"slow"` or `"error_on_reset"`, default panic; see
/// [`Fault`]), `step_us` (every step sleeps this long first, default 0).
/// A slow step is not a failure: it counts.
#[derive(Debug)]
pub(crate) struct FaultyCounter {
    inner: CountingEnv,
    calls: i64,
    resets: i64,
    fail_at: i64,
    fault: Fault,
    step: std::time::Duration,
}

/// The message of the failure at step call `call`.
pub(crate) fn fault_message(fault: Fault, call: i64) -> String {
    match fault {
        Fault::Panic => format!("deliberate panic at step {call}"),
        Fault::Error => format!("deliberate error at step {call}"),
        Fault::Hang => format!("deliberate hang at step {call}"),
        Fault::Abort => format!("deliberate abort at step {call}"),
        Fault::Slow => format!("deliberate slow step {call}"),
        Fault::ErrorOnReset => format!("deliberate error at reset {call}"),
    }
}

impl FaultyCounter {
    fn from_kwargs(kwargs: &Kwargs) -> Result<FaultyCounter, EnvError> {
        let reader = kwargs.reader(
            FAULTY,
            &["start_val", "max_steps", "fail_at", "fault", "step_us"],
        );
        let start_val = reader.int("start_val", Some(0))?;
        let max_steps = reader.int("max_steps", Some(1 << 30))?;
        let fail_at = reader.int("fail_at", Some(0))?;
        let step_us = reader.uint("step_us", Some(0))?;
        let fault = match reader.string("fault", Some("panic"))?.as_str() {
            "panic" => Fault::Panic,
            "error" => Fault::Error,
            "hang" => Fault::Hang,
            "abort" => Fault::Abort,
            "slow" => Fault::Slow,
            "error_on_reset" => Fault::ErrorOnReset,
            other => return Err(reader.invalid("fault", format!("{other:?}"))),
        };
        reader.finish()?;
        let to_i32 = |v: i64| i32::try_from(v).map_err(|_| EnvError::failed(FAULTY, "too big"));
        Ok(FaultyCounter {
            inner: CountingEnv::new(to_i32(start_val)?, to_i32(max_steps)?),
            calls: 0,
            resets: 0,
            fail_at,
            fault,
            step: std::time::Duration::from_micros(step_us),
        })
    }
}

impl Env for FaultyCounter {
    fn specs(&self) -> &EnvSpecs {
        self.inner.specs()
    }

    fn set_seed(&mut self, seed: u64) {
        self.inner.set_seed(seed);
    }

    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        self.resets += 1;
        if self.fault == Fault::ErrorOnReset && self.resets == self.fail_at {
            let message = fault_message(self.fault, self.resets);
            return Err(EnvError::failed(FAULTY, message));
        }
        self.inner.reset_into(input, out)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        self.calls += 1;
        let mut sleep = self.step;
        if self.calls == self.fail_at {
            let message = fault_message(self.fault, self.calls);
            match self.fault {
                Fault::Panic => panic!("{message}"),
                Fault::Error => return Err(EnvError::failed(FAULTY, message)),
                Fault::Hang => std::thread::sleep(std::time::Duration::from_secs(3600)),
                Fault::Abort => std::process::abort(),
                Fault::Slow => sleep *= 10,
                Fault::ErrorOnReset => {}
            }
        }
        if !sleep.is_zero() {
            std::thread::sleep(sleep);
        }
        self.inner.step_into(input, next)
    }

    fn name(&self) -> &str {
        FAULTY
    }
}

/// The registry name of [`WhereAmI`].
pub(crate) const WHERE_AM_I: &str = "WhereAmI";

/// An env that reports where it runs: its observation (`i64`, shape `[3]`)
/// is the number of CPUs its thread may run on, the first of them, and its
/// process id. Steps count nothing and are never done.
#[derive(Debug)]
pub(crate) struct WhereAmI {
    specs: EnvSpecs,
}

impl WhereAmI {
    fn new() -> WhereAmI {
        let action = TensorSpec::binary(&[1], DType::I64).expect("valid");
        let observation = TensorSpec::unbounded(&[3], DType::I64);
        WhereAmI {
            specs: EnvSpecs::standard(action, observation).expect("valid"),
        }
    }

    fn observe(out: &mut TensorDict) -> Result<(), EnvError> {
        let cpus = pool::current_cpus().map_err(|e| EnvError::failed(WHERE_AM_I, e.to_string()))?;
        let obs = [
            cpus.len() as i64,
            cpus[0] as i64,
            i64::from(std::process::id()),
        ];
        out.tensor_mut("observation")?
            .as_mut_slice::<i64>()?
            .copy_from_slice(&obs);
        Ok(())
    }
}

impl Env for WhereAmI {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn set_seed(&mut self, _seed: u64) {}

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        WhereAmI::observe(out)
    }

    fn step_into(&mut self, _input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        WhereAmI::observe(next)
    }

    fn name(&self) -> &str {
        WHERE_AM_I
    }
}

/// The registry name of a constructor that panics.
pub(crate) const PANICS_WHEN_BUILT: &str = "PanicsWhenBuilt";

/// Registers the test envs in the process-wide registry (once).
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        pool::envs::register(
            PANICS_WHEN_BUILT,
            |_: &Kwargs| -> Result<Box<dyn Env>, EnvError> {
                panic!("deliberate panic in a constructor")
            },
        )
        .expect("PanicsWhenBuilt is registered once");
        pool::envs::register(WHERE_AM_I, |_: &Kwargs| {
            Ok(Box::new(WhereAmI::new()) as Box<dyn Env>)
        })
        .expect("WhereAmI is registered once");
        pool::envs::register(FAULTY, |kwargs: &Kwargs| {
            Ok(Box::new(FaultyCounter::from_kwargs(kwargs)?) as Box<dyn Env>)
        })
        .expect("FaultyCounter is registered once");
    });
}

/// Keyword arguments of a FaultyCounter that fails at step `fail_at` with
/// `fault` (0: never).
pub(crate) fn faulty_kwargs(fail_at: i64, fault: Fault) -> Kwargs {
    Kwargs::new()
        .with("fail_at", fail_at)
        .with("fault", fault.name())
}
