//! `Registry`: env constructors by name, taking keyword arguments; and the
//! process-wide registry that worker processes build their envs from.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use crate::{CartPole, CountingEnv, Env, EnvError, Kwargs, LatencyEnv, Pendulum};

/// A constructor: keyword arguments in, a boxed env out.
pub type Constructor = Arc<dyn Fn(&Kwargs) -> Result<Box<dyn Env>, EnvError> + Send + Sync>;

/// A plain constructor function.
type MakeFn = fn(&Kwargs) -> Result<Box<dyn Env>, EnvError>;

/// Env constructors by name.
///
/// A process pool builds its envs in worker processes by name, so an env that
/// should run there is registered (in the process-wide registry, see
/// [`register`]) before the pool starts, in every process: the program's
/// `main` is the place.
///
/// ```
/// use envs::{CountingEnv, Env, Kwargs, Registry};
/// # fn main() -> Result<(), envs::EnvError> {
/// let mut registry = Registry::with_reference_envs();
/// registry.register("Counter10", |kwargs: &Kwargs| {
///     kwargs.reader("Counter10", &[]).finish()?;
///     Ok(Box::new(CountingEnv::new(0, 10)) as Box<dyn Env>)
/// })?;
/// let env = registry.make("Counter10", &Kwargs::new())?;
/// assert_eq!(env.name(), "CountingEnv");
/// let err = registry.make("Nope-v0", &Kwargs::new()).err().unwrap();
/// assert!(err.to_string().starts_with("unknown env \"Nope-v0\"; registered envs: [CartPole-v1, "));
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    constructors: BTreeMap<String, Constructor>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("names", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry with the reference envs: `CartPole-v1`, `Pendulum-v1`,
    /// `CountingEnv` and `LatencyEnv`.
    pub fn with_reference_envs() -> Registry {
        let mut registry = Registry::new();
        let reference: [(&str, MakeFn); 4] = [
            (crate::cartpole::NAME, |k| {
                Ok(Box::new(CartPole::from_kwargs(k)?))
            }),
            (crate::pendulum::NAME, |k| {
                Ok(Box::new(Pendulum::from_kwargs(k)?))
            }),
            (crate::counting::NAME, |k| {
                Ok(Box::new(CountingEnv::from_kwargs(k)?))
            }),
            (crate::latency::NAME, |k| {
                Ok(Box::new(LatencyEnv::from_kwargs(k)?))
            }),
        ];
        for (name, constructor) in reference {
            registry
                .register(name, constructor)
                .expect("reference names are distinct");
        }
        registry
    }

    /// Registers `constructor` under `name`; an error if the name is taken.
    pub fn register<F>(&mut self, name: &str, constructor: F) -> Result<(), EnvError>
    where
        F: Fn(&Kwargs) -> Result<Box<dyn Env>, EnvError> + Send + Sync + 'static,
    {
        if self.constructors.contains_key(name) {
            return Err(EnvError::AlreadyRegistered {
                name: name.to_owned(),
            });
        }
        self.constructors
            .insert(name.to_owned(), Arc::new(constructor));
        Ok(())
    }

    /// Builds the env registered as `name`; an error listing the known names
    /// if there is none, or the constructor's error.
    pub fn make(&self, name: &str, kwargs: &Kwargs) -> Result<Box<dyn Env>, EnvError> {
        let constructor = self.constructor(name)?;
        constructor(kwargs)
    }

    /// The constructor registered as `name`.
    pub fn constructor(&self, name: &str) -> Result<Constructor, EnvError> {
        self.constructors
            .get(name)
            .cloned()
            .ok_or_else(|| EnvError::UnknownEnv {
                name: name.to_owned(),
                known: self.names(),
            })
    }

    /// True if `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.constructors.contains_key(name)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.constructors.keys().cloned().collect()
    }
}

fn global() -> &'static RwLock<Registry> {
    static GLOBAL: OnceLock<RwLock<Registry>> = OnceLock::new();
    GLOBAL.get_or_init(|| RwLock::new(Registry::with_reference_envs()))
}

/// Registers `constructor` under `name` in the process-wide registry (which
/// starts with the reference envs); an error if the name is taken.
///
/// ```
/// use envs::{CountingEnv, Env, Kwargs};
/// # fn main() -> Result<(), envs::EnvError> {
/// envs::register("MyCounter", |kwargs: &Kwargs| {
///     Ok(Box::new(CountingEnv::from_kwargs(kwargs)?) as Box<dyn Env>)
/// })?;
/// let env = envs::make("MyCounter", &Kwargs::new().with("max_steps", 3))?;
/// assert!(envs::registered().contains(&"MyCounter".to_string()));
/// # let _ = env;
/// # Ok(()) }
/// ```
pub fn register<F>(name: &str, constructor: F) -> Result<(), EnvError>
where
    F: Fn(&Kwargs) -> Result<Box<dyn Env>, EnvError> + Send + Sync + 'static,
{
    // A poisoned lock only means a panic elsewhere while registering; the map
    // itself is always consistent, so go on with it.
    let mut registry = global()
        .write()
        .unwrap_or_else(|poison| poison.into_inner());
    registry.register(name, constructor)
}

/// Builds the env registered as `name` in the process-wide registry.
pub fn make(name: &str, kwargs: &Kwargs) -> Result<Box<dyn Env>, EnvError> {
    // Look the constructor up, then release the lock before running it, so a
    // constructor may itself use the registry.
    let constructor = global()
        .read()
        .unwrap_or_else(|poison| poison.into_inner())
        .constructor(name)?;
    constructor(kwargs)
}

/// The names in the process-wide registry, sorted.
pub fn registered() -> Vec<String> {
    global()
        .read()
        .unwrap_or_else(|poison| poison.into_inner())
        .names()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_envs_are_registered() {
        let registry = Registry::with_reference_envs();
        assert_eq!(
            registry.names(),
            ["CartPole-v1", "CountingEnv", "LatencyEnv", "Pendulum-v1"]
        );
        for name in registry.names() {
            let env = registry.make(&name, &Kwargs::new()).unwrap();
            assert_eq!(env.name(), name);
        }
    }

    #[test]
    fn errors_name_what_is_known() {
        let mut registry = Registry::with_reference_envs();
        let err = registry.make("Cartpole", &Kwargs::new()).err().unwrap();
        assert_eq!(
            err.to_string(),
            "unknown env \"Cartpole\"; registered envs: [CartPole-v1, CountingEnv, LatencyEnv, Pendulum-v1]"
        );
        let err = registry
            .register("CartPole-v1", |_: &Kwargs| Err(EnvError::failed("x", "y")))
            .unwrap_err();
        assert_eq!(err.to_string(), "env \"CartPole-v1\" is already registered");
        let err = registry
            .make("CountingEnv", &Kwargs::new().with("max_step", 3))
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "CountingEnv: unknown keyword argument(s) [max_step]; accepted: [start_val, max_steps, seed]"
        );
    }

    #[test]
    fn the_global_registry_takes_new_names() {
        register("registry-test-env", |k: &Kwargs| {
            Ok(Box::new(CountingEnv::from_kwargs(k)?) as Box<dyn Env>)
        })
        .unwrap();
        assert!(
            register("registry-test-env", |_: &Kwargs| Err(EnvError::failed(
                "x", "y"
            )))
            .is_err()
        );
        assert!(make("registry-test-env", &Kwargs::new()).is_ok());
        assert!(registered().iter().any(|n| n == "CartPole-v1"));
    }
}
