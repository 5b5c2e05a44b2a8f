//! What moving a cache line between the two cores costs: the floor under
//! any hand-off between a pool's threads (docs/performance.md, "What
//! bounds the goals"). Standard library only:
//!
//! ```text
//! rustc -O scripts/line_transfer.rs -o /tmp/line_transfer && /tmp/line_transfer
//! ```
//!
//! Two measurements, two threads each (on a 2-core machine, one a core):
//! - a ping-pong of two flags, each on its own line: every step waits for
//!   the other thread's store, so each round trip is two transfers one
//!   after the other (what a claim, a publication and its wait cost);
//! - 64 lines written by one thread, then read by the other after one flag:
//!   independent transfers that overlap (what a batch of rows written by
//!   the workers and gathered by the caller costs, per line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A word alone on its cache line (and the adjacent one, which the
/// prefetcher pairs with it).
#[repr(align(128))]
struct Line(AtomicU64);

fn ping_pong(rounds: u64) -> f64 {
    let flags = Arc::new((Line(AtomicU64::new(0)), Line(AtomicU64::new(0))));
    let other = Arc::clone(&flags);
    let echo = std::thread::spawn(move || {
        for i in 0..rounds {
            while other.0 .0.load(Ordering::Acquire) != 2 * i + 1 {}
            other.1 .0.store(2 * i + 2, Ordering::Release);
        }
    });
    let start = Instant::now();
    for i in 0..rounds {
        flags.0 .0.store(2 * i + 1, Ordering::Release);
        while flags.1 .0.load(Ordering::Acquire) != 2 * i + 2 {}
    }
    let elapsed = start.elapsed();
    echo.join().expect("the echo thread");
    elapsed.as_nanos() as f64 / rounds as f64
}

fn streamed(lines: usize, rounds: u64) -> f64 {
    let block: Arc<Vec<Line>> = Arc::new((0..lines).map(|_| Line(AtomicU64::new(0))).collect());
    let flags = Arc::new((Line(AtomicU64::new(0)), Line(AtomicU64::new(0))));
    let (reader_block, reader_flags) = (Arc::clone(&block), Arc::clone(&flags));
    let reader = std::thread::spawn(move || {
        let mut sum = 0u64;
        for round in 1..=rounds {
            while reader_flags.0 .0.load(Ordering::Acquire) != round {}
            for line in reader_block.iter() {
                sum = sum.wrapping_add(line.0.load(Ordering::Relaxed));
            }
            reader_flags.1 .0.store(round, Ordering::Release);
        }
        sum
    });
    let start = Instant::now();
    for round in 1..=rounds {
        for line in block.iter() {
            line.0.store(round, Ordering::Relaxed);
        }
        flags.0 .0.store(round, Ordering::Release);
        while flags.1 .0.load(Ordering::Acquire) != round {}
    }
    let elapsed = start.elapsed();
    std::hint::black_box(reader.join().expect("the reader thread"));
    elapsed.as_nanos() as f64 / rounds as f64
}

fn main() {
    for _ in 0..3 {
        let round_trip = ping_pong(2_000_000);
        let lines = 64;
        let round = streamed(lines, 200_000);
        println!(
            "ping-pong round trip {round_trip:.0} ns ({:.0} ns a transfer); \
             {lines} lines written here and read there: {round:.0} ns a round, {:.1} ns a line",
            round_trip / 2.0,
            round / lines as f64
        );
    }
}
