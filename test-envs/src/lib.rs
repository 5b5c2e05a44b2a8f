//! Test envs shared by the workspace's tests: one set, used by every
//! crate's tests as a dev-dependency (never by a library).
//!
//! - [`FaultyCounter`]: a `CountingEnv` that panics, returns an error,
//!   hangs, aborts its process, is slow, or holds a step until the test
//!   releases it, at a given step (or fails at a given reset);
//! - [`WhereAmI`]: reports the CPUs and process it runs on;
//! - [`OnStep`]: a `CountingEnv` whose steps go through a closure (an env
//!   that does something around a plain step: waits on a gate, records its
//!   thread, breaks its layout);
//! - [`Stateful`]: a `CountingEnv` with a state entry;
//! - [`TwoCounters`]: two counters in one env (batch size `[2]`).
//!
//! The envs built by name (in worker processes too) are registered by
//! [`register`]: a test binary whose worker processes build them calls it
//! before `pool::init()` in its worker entry point, as the parent does.

#![forbid(unsafe_code)]

mod faulty;
mod on_step;
mod stateful;
mod two_counters;
mod where_am_i;

pub use crate::faulty::{
    fault_message, faulty_kwargs, held_kwargs, Fault, FaultyCounter, Release, FAULTY,
};
pub use crate::on_step::OnStep;
pub use crate::stateful::Stateful;
pub use crate::two_counters::TwoCounters;
pub use crate::where_am_i::{WhereAmI, WHERE_AM_I};

use std::sync::Once;

use envs::{Env, EnvError, Kwargs};

/// The registry name of a constructor that panics.
pub const PANICS_WHEN_BUILT: &str = "PanicsWhenBuilt";

/// Registers the envs built by name ([`FaultyCounter`], [`WhereAmI`],
/// [`PANICS_WHEN_BUILT`]) in the process-wide registry, once.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        envs::register(
            PANICS_WHEN_BUILT,
            |_: &Kwargs| -> Result<Box<dyn Env>, EnvError> {
                panic!("deliberate panic in a constructor")
            },
        )
        .expect("PanicsWhenBuilt is registered once");
        envs::register(WHERE_AM_I, |_: &Kwargs| {
            Ok(Box::new(WhereAmI::new()) as Box<dyn Env>)
        })
        .expect("WhereAmI is registered once");
        envs::register(FAULTY, |kwargs: &Kwargs| {
            Ok(Box::new(FaultyCounter::from_kwargs(kwargs)?) as Box<dyn Env>)
        })
        .expect("FaultyCounter is registered once");
    });
}
