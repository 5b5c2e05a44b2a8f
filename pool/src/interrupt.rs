//! Interrupting a wait from the waiting thread: [`interruptible`] runs a
//! pool call with a check that every wait of that call runs at least every
//! [`CHECK_EVERY`] while it blocks; when the check says stop, the wait ends
//! with [`PoolError::Interrupted`](crate::PoolError::Interrupted) and
//! nothing is lost. This is how a binding answers Ctrl-C (Python's bindings
//! check for signals) while a call blocks with its own lock released.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How often a blocked wait runs the check (Ctrl-C is noticed within this).
pub const CHECK_EVERY: Duration = Duration::from_millis(50);

struct Check {
    check: Rc<dyn Fn() -> bool>,
    last: Instant,
}

thread_local! {
    static CHECK: RefCell<Option<Check>> = const { RefCell::new(None) };
}

/// Runs `call` (pool calls on this thread) with `check` consulted by every
/// wait inside it, at most once per [`CHECK_EVERY`]: a wait whose check
/// returns `true` ends with `PoolError::Interrupted`, having taken nothing
/// (the results it waited for stay in flight, for a later receive). Calls
/// nest: the innermost check applies.
///
/// ```
/// use std::time::Duration;
/// use pool::{AsyncEnvPool, PoolError, Recv, Target};
/// use pool::envs::Kwargs;
/// use pool::tensordict::{Tensor, TensorDict};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let kwargs = Kwargs::new().with("step_us", 300_000).with("mode", "sleep");
/// let pool = AsyncEnvPool::builder().registered_n("LatencyEnv", 1, kwargs).build()?;
/// pool.reset(None)?;
/// let mut td = TensorDict::new(&[1]);
/// td.set("action", Tensor::full(&[1, 1], 0i64))?;
/// pool.async_step_send(td, Target::All)?;
/// // A check that asks to stop: the 0.3 s step is not waited for.
/// let err = pool::interruptible(|| true, || pool.async_step_recv(Recv::new())).unwrap_err();
/// assert_eq!(err, PoolError::Interrupted);
/// // Nothing was lost: the result is still there to receive.
/// assert_eq!(pool.async_step_recv(Recv::new())?.len(), 1);
/// # Ok(()) }
/// ```
pub fn interruptible<R>(check: impl Fn() -> bool + 'static, call: impl FnOnce() -> R) -> R {
    let new = Check {
        check: Rc::new(check),
        last: Instant::now(),
    };
    let outer = CHECK.with(|slot| slot.borrow_mut().replace(new));
    // Restored on the way out, panics included.
    struct Restore(Option<Check>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CHECK.with(|slot| *slot.borrow_mut() = outer);
        }
    }
    let _restore = Restore(outer);
    call()
}

/// Whether this thread's calls run under a check.
pub(crate) fn active() -> bool {
    CHECK.with(|slot| slot.borrow().is_some())
}

/// Runs this thread's check if [`CHECK_EVERY`] has passed since it last
/// ran (or since [`interruptible`] began); whether it asks to stop.
pub(crate) fn requested() -> bool {
    let due = CHECK.with(|slot| {
        let mut slot = slot.borrow_mut();
        let check = slot.as_mut()?;
        let now = Instant::now();
        if now.duration_since(check.last) < CHECK_EVERY {
            return None;
        }
        check.last = now;
        Some(check.check.clone())
    });
    // Run outside the borrow: the check may itself call into a pool.
    due.is_some_and(|check| check())
}

/// The deadline a wait should sleep until: `deadline`, or sooner when a
/// check must run.
pub(crate) fn wake_by(deadline: Option<Instant>) -> Option<Instant> {
    if !active() {
        return deadline;
    }
    let next = Instant::now() + CHECK_EVERY;
    Some(deadline.map_or(next, |d| d.min(next)))
}
