//! Test envs for the pool's failure paths: `FaultyCounter`, a CountingEnv
//! that panics or returns an error at a given step, registered by name so
//! that any backend can build it.

use std::sync::Once;

use pool::envs::{CountingEnv, Env, EnvError, EnvSpecs, Kwargs};
use pool::tensordict::TensorDict;

/// The registry name of [`FaultyCounter`].
pub(crate) const FAULTY: &str = "FaultyCounter";

/// How a [`FaultyCounter`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `step_into` panics.
    Panic,
    /// `step_into` returns `EnvError::failed`.
    Error,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Panic => "panic",
            Fault::Error => "error",
        }
    }
}

/// A [`CountingEnv`] whose `fail_at`-th step call (counted from 1 since the
/// env was built; 0: never) fails without counting; every other call counts
/// as CountingEnv does. Keywords: `start_val`, `max_steps` (as CountingEnv),
/// `fail_at` (default 0), `fault` (`"panic"` or `"error"`, default panic).
#[derive(Debug)]
pub(crate) struct FaultyCounter {
    inner: CountingEnv,
    calls: i64,
    fail_at: i64,
    fault: Fault,
}

/// The message of the failure at step call `call`.
pub(crate) fn fault_message(fault: Fault, call: i64) -> String {
    match fault {
        Fault::Panic => format!("deliberate panic at step {call}"),
        Fault::Error => format!("deliberate error at step {call}"),
    }
}

impl FaultyCounter {
    fn from_kwargs(kwargs: &Kwargs) -> Result<FaultyCounter, EnvError> {
        let reader = kwargs.reader(FAULTY, &["start_val", "max_steps", "fail_at", "fault"]);
        let start_val = reader.int("start_val", Some(0))?;
        let max_steps = reader.int("max_steps", Some(1 << 30))?;
        let fail_at = reader.int("fail_at", Some(0))?;
        let fault = match reader.string("fault", Some("panic"))?.as_str() {
            "panic" => Fault::Panic,
            "error" => Fault::Error,
            other => return Err(reader.invalid("fault", format!("{other:?}"))),
        };
        reader.finish()?;
        let to_i32 = |v: i64| i32::try_from(v).map_err(|_| EnvError::failed(FAULTY, "too big"));
        Ok(FaultyCounter {
            inner: CountingEnv::new(to_i32(start_val)?, to_i32(max_steps)?),
            calls: 0,
            fail_at,
            fault,
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
        self.inner.reset_into(input, out)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        self.calls += 1;
        if self.calls == self.fail_at {
            let message = fault_message(self.fault, self.calls);
            match self.fault {
                Fault::Panic => panic!("{message}"),
                Fault::Error => return Err(EnvError::failed(FAULTY, message)),
            }
        }
        self.inner.step_into(input, next)
    }

    fn name(&self) -> &str {
        FAULTY
    }
}

/// Registers the test envs in the process-wide registry (once).
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
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
