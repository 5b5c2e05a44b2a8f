//! `Bells`: a shared region of doorbells, one per cache line, that
//! processes ring and sleep on (spin briefly, then a shared futex) — for a
//! group of slots served by one worker: the parent posts commands to the
//! slots, then rings the worker's bell once.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::ExchangeError;
use crate::futex::{bell, WaitOutcome};
use crate::region::Region;

/// Bytes per bell: each on its own cache line.
const STRIDE: usize = 64;

/// Doorbells in shared memory (a memfd): ring one, and whoever sleeps on
/// it wakes. Waiting takes a ticket first ([`Bells::listen`]), checks for
/// work, then waits for a ring after the ticket ([`Bells::wait`]): a ring
/// between the two is never missed.
///
/// ```
/// use exchange::Bells;
/// use std::time::{Duration, Instant};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bells = Bells::create("doc", 2)?;
/// let other = Bells::open(bells.try_clone_fd()?)?; // in another process
/// assert_eq!(other.len(), 2);
/// let ticket = bells.listen(1);
/// other.ring(1);
/// assert!(bells.wait(1, ticket, Some(Instant::now() + Duration::from_secs(1)), Duration::ZERO));
/// // Nothing rang since the new ticket: the wait times out.
/// let ticket = bells.listen(1);
/// assert!(!bells.wait(1, ticket, Some(Instant::now()), Duration::ZERO));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Bells {
    region: Region,
    count: usize,
}

impl Bells {
    /// A region of `count` bells (at least one), all quiet.
    pub fn create(name: &str, count: usize) -> Result<Bells, ExchangeError> {
        let len = count
            .max(1)
            .checked_mul(STRIDE)
            .ok_or(ExchangeError::SizeMismatch {
                what: "bell count",
                found: count as u64,
                expected: (usize::MAX / STRIDE) as u64,
            })?;
        Ok(Bells {
            region: Region::create(name, len)?,
            count: count.max(1),
        })
    }

    /// Opens bells made by [`Bells::create`] (in this process or another)
    /// from a descriptor; the count comes from the region's size, which
    /// must be a whole number of bells.
    pub fn open(fd: OwnedFd) -> Result<Bells, ExchangeError> {
        let region = Region::open(fd)?;
        if region.len() % STRIDE != 0 {
            return Err(ExchangeError::SizeMismatch {
                what: "bells region",
                found: region.len() as u64,
                expected: (region.len() / STRIDE * STRIDE) as u64,
            });
        }
        let count = region.len() / STRIDE;
        Ok(Bells { region, count })
    }

    /// The region's descriptor, to pass to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd()
    }

    /// A new descriptor of the region, for [`Bells::open`] elsewhere.
    pub fn try_clone_fd(&self) -> Result<OwnedFd, ExchangeError> {
        Ok(self.region.try_clone_fd()?)
    }

    /// Number of bells.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: a region holds at least one bell.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The word of bell `i`.
    ///
    /// # Panics
    /// If `i` is not below [`Bells::len`].
    fn word(&self, i: usize) -> &crate::primitive::sync::atomic::AtomicU32 {
        assert!(i < self.count, "bell {i} of {}", self.count);
        self.region
            .atomic_u32(i * STRIDE)
            .expect("a bell lies in the region, 4-aligned")
    }

    /// A ticket for [`Bells::wait`] on bell `i`: take it before looking for
    /// work.
    pub fn listen(&self, i: usize) -> u32 {
        bell::listen(self.word(i))
    }

    /// Rings bell `i`: wakes its sleepers (a system call only if one
    /// sleeps).
    pub fn ring(&self, i: usize) {
        bell::ring(self.word(i));
    }

    /// Waits until bell `i` rang after `ticket` was taken: spins for up to
    /// `spin`, then sleeps, until a ring (`true`) or `deadline` (`false`).
    pub fn wait(&self, i: usize, ticket: u32, deadline: Option<Instant>, spin: Duration) -> bool {
        bell::wait_bell(self.word(i), ticket, deadline, spin) != WaitOutcome::TimedOut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_from_another_thread_wakes_a_sleeper_of_that_bell_only() {
        let bells = Arc::new(Bells::create("test", 3).unwrap());
        assert_eq!(bells.len(), 3);
        let ticket = bells.listen(2);
        let other = Arc::clone(&bells);
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.ring(0);
            other.ring(2);
        });
        assert!(bells.wait(
            2,
            ticket,
            Some(Instant::now() + Duration::from_secs(10)),
            Duration::ZERO
        ));
        ringer.join().unwrap();
        let ticket = bells.listen(1);
        assert!(!bells.wait(
            1,
            ticket,
            Some(Instant::now() + Duration::from_millis(10)),
            Duration::ZERO
        ));
    }

    #[test]
    fn open_checks_the_size() {
        let region = Region::create("test", 100).unwrap();
        let err = Bells::open(region.try_clone_fd().unwrap()).unwrap_err();
        assert!(err.to_string().contains("bells region"), "{err}");
        let bells = Bells::create("test", 2).unwrap();
        let same = Bells::open(bells.try_clone_fd().unwrap()).unwrap();
        assert_eq!(same.len(), 2);
        let ticket = bells.listen(1);
        same.ring(1);
        assert_ne!(bells.listen(1), ticket);
    }
}
