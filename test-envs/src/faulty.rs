//! `FaultyCounter`: a `CountingEnv` that panics, returns an error, hangs,
//! aborts its process, is slow or holds a step until released at a given
//! step (or fails at a given reset), built by name so that any backend
//! (worker processes too) can build it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envs::{CountingEnv, Env, EnvError, EnvSpecs, Kwargs};
use tensordict::TensorDict;

/// The registry name of [`FaultyCounter`].
pub const FAULTY: &str = "FaultyCounter";

/// How a [`FaultyCounter`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
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
    /// `step_into` waits until the file named by the keyword `release`
    /// exists (a [`Release`]), at most `hold_ms` (default a minute), then
    /// counts as usual: a slow step that lasts until the test lets it end.
    Hold,
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
            Fault::Hold => "hold",
            Fault::ErrorOnReset => "error_on_reset",
        }
    }
}

/// A [`CountingEnv`] whose `fail_at`-th step call (counted from 1 since the
/// env was built; 0: never) fails without counting; every other call counts
/// as CountingEnv does. Keywords: `start_val`, `max_steps` (as CountingEnv),
/// `fail_at` (default 0), `fault` (`"panic"`, `"error"`, `"hang"`,
/// `"abort"`, `"slow"`, `"hold"` or `"error_on_reset"`, default panic; see
/// [`Fault`]), `step_us` (every step sleeps this long first, default 0),
/// `release` and `hold_ms` (for `"hold"`). A slow or held step is not a
/// failure: it counts.
#[derive(Debug)]
pub struct FaultyCounter {
    inner: CountingEnv,
    calls: i64,
    resets: i64,
    fail_at: i64,
    fault: Fault,
    step: Duration,
    release: Option<PathBuf>,
    hold: Duration,
}

/// The message of the failure at step call `call`.
pub fn fault_message(fault: Fault, call: i64) -> String {
    match fault {
        Fault::Panic => format!("deliberate panic at step {call}"),
        Fault::Error => format!("deliberate error at step {call}"),
        Fault::Hang => format!("deliberate hang at step {call}"),
        Fault::Abort => format!("deliberate abort at step {call}"),
        Fault::Slow => format!("deliberate slow step {call}"),
        Fault::Hold => format!("deliberate held step {call}"),
        Fault::ErrorOnReset => format!("deliberate error at reset {call}"),
    }
}

impl FaultyCounter {
    /// Builds one from its keywords (see the type's docs); an unknown
    /// keyword or fault, or a count past `i32`, is an error naming it.
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<FaultyCounter, EnvError> {
        let reader = kwargs.reader(
            FAULTY,
            &[
                "start_val",
                "max_steps",
                "fail_at",
                "fault",
                "step_us",
                "release",
                "hold_ms",
            ],
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
            "hold" => Fault::Hold,
            "error_on_reset" => Fault::ErrorOnReset,
            other => return Err(reader.invalid("fault", format!("{other:?}"))),
        };
        let release = reader.string("release", Some(""))?;
        let hold_ms = reader.uint("hold_ms", Some(60_000))?;
        reader.finish()?;
        let to_i32 = |v: i64| i32::try_from(v).map_err(|_| EnvError::failed(FAULTY, "too big"));
        Ok(FaultyCounter {
            inner: CountingEnv::new(to_i32(start_val)?, to_i32(max_steps)?),
            calls: 0,
            resets: 0,
            fail_at,
            fault,
            step: Duration::from_micros(step_us),
            release: (!release.is_empty()).then(|| PathBuf::from(release)),
            hold: Duration::from_millis(hold_ms),
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
                Fault::Hang => std::thread::sleep(Duration::from_secs(3600)),
                Fault::Hold => {
                    let until = Instant::now() + self.hold;
                    let released = || self.release.as_deref().is_some_and(Path::exists);
                    while !released() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
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

/// Keyword arguments of a FaultyCounter whose step `at` is held until
/// `release` lets it end.
pub fn held_kwargs(at: i64, release: &Release) -> Kwargs {
    faulty_kwargs(at, Fault::Hold).with("release", release.path().to_string_lossy().as_ref())
}

/// What ends the held steps of [`Fault::Hold`]: a file (a path unique to
/// this process and object) that the held envs, in any process, wait to
/// see. Removed on drop.
#[derive(Debug)]
pub struct Release {
    path: PathBuf,
}

impl Release {
    /// A release not given yet: its file does not exist.
    pub fn new() -> Release {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("rlpool-release-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Release { path }
    }

    /// The file the held envs wait for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lets every held step end (creates the file).
    ///
    /// # Panics
    /// If the file cannot be created (a test setup failure).
    pub fn release(&self) {
        std::fs::write(&self.path, b"released")
            .unwrap_or_else(|err| panic!("creating {}: {err}", self.path.display()));
    }
}

impl Default for Release {
    fn default() -> Self {
        Release::new()
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Keyword arguments of a FaultyCounter that fails at step `fail_at` with
/// `fault` (0: never).
pub fn faulty_kwargs(fail_at: i64, fault: Fault) -> Kwargs {
    Kwargs::new()
        .with("fail_at", fail_at)
        .with("fault", fault.name())
}
