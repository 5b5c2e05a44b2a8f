//! `Target` (which envs a send addresses) and `Recv` (how many results a
//! receive waits for, and for how long).

use std::time::Duration;

/// Which envs an asynchronous send addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The envs named by the tensordict's `"env_index"` entry, one per row.
    EnvIndex,
    /// One env; the tensordict is that env's (batch size `[]`, or `[1]`).
    /// Its result is taken by a per-env receive only.
    Env(usize),
    /// These envs, one per row of the tensordict, in order.
    Envs(Vec<usize>),
    /// Every env, env `i` from row `i`.
    All,
}

/// What a batch receive waits for.
///
/// ```
/// use std::time::Duration;
/// let recv = pool::Recv::new().min_get(3).max_get(3).timeout(Duration::from_millis(100));
/// assert_eq!(recv.min_get, 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recv {
    /// The least number of results to return: a hard lower bound (default 1).
    pub min_get: usize,
    /// The most results to return (default: all that are ready).
    pub max_get: Option<usize>,
    /// A deadline for the whole call, from entry. `None` waits as long as it
    /// takes; zero polls. With a timeout, the call returns once `max_get`
    /// results are ready or at the deadline with what is ready (at least
    /// `min_get`); without one, as soon as `min_get` are ready, with all that
    /// are ready then (up to `max_get`).
    pub timeout: Option<Duration>,
}

impl Default for Recv {
    fn default() -> Self {
        Recv {
            min_get: 1,
            max_get: None,
            timeout: None,
        }
    }
}

impl Recv {
    /// `min_get` 1, no `max_get`, no timeout.
    pub fn new() -> Recv {
        Recv::default()
    }

    /// Waits for every env in flight: `min_get = n`.
    pub fn all(n: usize) -> Recv {
        Recv::new().min_get(n)
    }

    /// Sets `min_get`.
    pub fn min_get(mut self, min_get: usize) -> Recv {
        self.min_get = min_get;
        self
    }

    /// Sets `max_get`.
    pub fn max_get(mut self, max_get: usize) -> Recv {
        self.max_get = Some(max_get);
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Recv {
        self.timeout = Some(timeout);
        self
    }
}
