//! `ExchangeStats`: how full the batches of an exchange were and how long
//! results and actions waited, as TorchRL's `_SharedSlotExchange.stats`
//! reports them; and the clock they are measured on.
//!
//! Times are nanoseconds of `CLOCK_MONOTONIC` ([`now_ns`]), which every
//! process of the machine shares: a worker stamps the time it published a
//! result into the slot header, and the parent subtracts it from the time it
//! took the result.
//!
//! The bookkeeping follows TorchRL's definitions:
//!
//! - a receive is one batch of `items` results, of capacity `max_get` (or
//!   `items` without `max_get`); it is partial when `max_get` was given and
//!   fewer came;
//! - observation to batch: from a result's publication to the receive that
//!   took it;
//! - batch to action: from the receive that took a slot's result to the
//!   next command posted to that slot (only for receives that track
//!   actions);
//! - the consumer is busy while at least one taken result waits for its
//!   action; the busy fraction is that time over the time since the first
//!   receive (or the last reset).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC`: the same clock in every process of the
/// machine (`std::time::Instant` reads it too, but keeps the raw value to
/// itself).
pub fn now_ns() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    // CLOCK_MONOTONIC is never negative; u64 nanoseconds last 584 years.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// A snapshot of an exchange's statistics ([`Exchange::stats`]): batch
/// counts, fill rates and latencies since the exchange was created or the
/// statistics were last reset.
///
/// [`Exchange::stats`]: crate::Exchange::stats
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExchangeStats {
    /// Number of receives that returned results (a per-slot receive counts
    /// as a batch of one).
    pub batches: u64,
    /// Number of results they returned.
    pub items: u64,
    /// `items / batches` (0 without batches).
    pub avg_batch_size: f64,
    /// `items` over the batches' capacity: each batch counts its `max_get`,
    /// or its own size when it had no `max_get` (0 without batches).
    pub batch_fill_ratio: f64,
    /// Fraction of the batches that returned fewer than their `max_get`.
    pub partial_batch_fraction: f64,
    /// Mean time from a result's publication to the receive that took it.
    pub avg_observation_to_batch: Duration,
    /// Mean time from the receive that took a slot's result to the next
    /// command posted to the slot (receives that track actions only).
    pub avg_batch_to_action: Duration,
    /// Fraction of the time since the first receive during which at least
    /// one taken result waited for its action.
    pub consumer_busy_fraction: f64,
}

/// One value of [`ExchangeStats::to_map`]: a count, or a ratio or average.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StatValue {
    /// A count (printed as an integer).
    Count(u64),
    /// A ratio, an average, or milliseconds.
    Float(f64),
}

impl StatValue {
    /// The value as a float, whatever its kind.
    pub fn as_f64(self) -> f64 {
        match self {
            StatValue::Count(n) => n as f64,
            StatValue::Float(x) => x,
        }
    }
}

impl fmt::Display for StatValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatValue::Count(n) => write!(f, "{n}"),
            StatValue::Float(x) => match f.precision() {
                Some(p) => write!(f, "{x:.p$}"),
                None => write!(f, "{x}"),
            },
        }
    }
}

impl ExchangeStats {
    /// The statistics by TorchRL's names (`batches`, `items`,
    /// `avg_batch_size`, `batch_fill_ratio`, `partial_batch_fraction`,
    /// `avg_observation_to_batch_ms`, `avg_batch_to_action_ms`,
    /// `consumer_busy_fraction`), for printing or a Python dict.
    pub fn to_map(&self) -> BTreeMap<&'static str, StatValue> {
        let ms = |d: Duration| StatValue::Float(d.as_secs_f64() * 1e3);
        BTreeMap::from([
            ("batches", StatValue::Count(self.batches)),
            ("items", StatValue::Count(self.items)),
            ("avg_batch_size", StatValue::Float(self.avg_batch_size)),
            ("batch_fill_ratio", StatValue::Float(self.batch_fill_ratio)),
            (
                "partial_batch_fraction",
                StatValue::Float(self.partial_batch_fraction),
            ),
            (
                "avg_observation_to_batch_ms",
                ms(self.avg_observation_to_batch),
            ),
            ("avg_batch_to_action_ms", ms(self.avg_batch_to_action)),
            (
                "consumer_busy_fraction",
                StatValue::Float(self.consumer_busy_fraction),
            ),
        ])
    }
}

/// One line: `2 batches, 4 items (2.00 per batch), fill 57.1%, partial
/// 50.0%, observation to batch 0.012 ms, batch to action 0.000 ms, consumer
/// busy 0.0%`.
impl fmt::Display for ExchangeStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} batches, {} items ({:.2} per batch), fill {:.1}%, partial {:.1}%, \
             observation to batch {:.3} ms, batch to action {:.3} ms, consumer busy {:.1}%",
            self.batches,
            self.items,
            self.avg_batch_size,
            self.batch_fill_ratio * 100.0,
            self.partial_batch_fraction * 100.0,
            self.avg_observation_to_batch.as_secs_f64() * 1e3,
            self.avg_batch_to_action.as_secs_f64() * 1e3,
            self.consumer_busy_fraction * 100.0,
        )
    }
}

/// The counters behind [`ExchangeStats`], kept by the reader. Every method
/// takes the current time ([`now_ns`]) so that tests can script it.
#[derive(Debug)]
pub(crate) struct StatsState {
    batches: u64,
    items: u64,
    /// Sum of the batches' capacities.
    capacity: u64,
    partial: u64,
    ready_dwell_ns: u128,
    ready_count: u64,
    action_dwell_ns: u128,
    action_count: u64,
    /// Busy time of the finished busy periods.
    busy_ns: u128,
    /// Start of the current busy period, if one is under way.
    busy_started: Option<u64>,
    /// Time of the first receive since creation or the last reset.
    metric_started: Option<u64>,
    /// For each slot whose result was taken by a tracking receive and not
    /// yet answered by a command: when it was taken.
    leased: Vec<Option<u64>>,
    leased_count: usize,
}

impl StatsState {
    /// Empty counters for `slots` slots.
    pub(crate) fn new(slots: usize) -> StatsState {
        StatsState {
            batches: 0,
            items: 0,
            capacity: 0,
            partial: 0,
            ready_dwell_ns: 0,
            ready_count: 0,
            action_dwell_ns: 0,
            action_count: 0,
            busy_ns: 0,
            busy_started: None,
            metric_started: None,
            leased: vec![None; slots],
            leased_count: 0,
        }
    }

    /// Counts one receive at `now` of the results `taken`, each a slot and
    /// the time its result was published. With `track_action`, each slot is
    /// leased until [`StatsState::record_action`].
    pub(crate) fn record_received(
        &mut self,
        now: u64,
        taken: impl ExactSizeIterator<Item = (usize, u64)>,
        max_get: Option<usize>,
        track_action: bool,
    ) {
        let items = taken.len() as u64;
        self.metric_started.get_or_insert(now);
        self.batches += 1;
        self.items += items;
        self.capacity += max_get.map_or(items, |m| m as u64);
        if max_get.is_some_and(|m| items < m as u64) {
            self.partial += 1;
        }
        if track_action && self.leased_count == 0 && items > 0 {
            self.busy_started = Some(now);
        }
        for (slot, published) in taken {
            if track_action && self.leased[slot].replace(now).is_none() {
                self.leased_count += 1;
            }
            self.ready_dwell_ns += u128::from(now.saturating_sub(published));
            self.ready_count += 1;
        }
    }

    /// Counts a command posted to `slot` at `now`: the end of its lease, if
    /// a tracking receive took its result.
    pub(crate) fn record_action(&mut self, slot: usize, now: u64) {
        let Some(leased_at) = self.leased[slot].take() else {
            return;
        };
        self.action_dwell_ns += u128::from(now.saturating_sub(leased_at));
        self.action_count += 1;
        self.leased_count -= 1;
        if self.leased_count == 0 {
            if let Some(started) = self.busy_started.take() {
                self.busy_ns += u128::from(now.saturating_sub(started));
            }
        }
    }

    /// The statistics at `now`; with `reset`, the counters start again
    /// (slots still leased stay leased, from `now`).
    pub(crate) fn snapshot(&mut self, now: u64, reset: bool) -> ExchangeStats {
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        let mean = |total: u128, count: u64| {
            if count == 0 {
                Duration::ZERO
            } else {
                Duration::from_nanos(u64::try_from(total / u128::from(count)).unwrap_or(u64::MAX))
            }
        };
        let busy = self.busy_ns
            + self
                .busy_started
                .map_or(0, |started| u128::from(now.saturating_sub(started)));
        let elapsed = self
            .metric_started
            .map_or(0, |started| now.saturating_sub(started));
        let stats = ExchangeStats {
            batches: self.batches,
            items: self.items,
            avg_batch_size: ratio(self.items as f64, self.batches as f64),
            batch_fill_ratio: ratio(self.items as f64, self.capacity as f64),
            partial_batch_fraction: ratio(self.partial as f64, self.batches as f64),
            avg_observation_to_batch: mean(self.ready_dwell_ns, self.ready_count),
            avg_batch_to_action: mean(self.action_dwell_ns, self.action_count),
            consumer_busy_fraction: ratio(busy as f64, elapsed as f64),
        };
        if reset {
            let leased = self.leased_count > 0;
            let slots = self.leased.len();
            let leases = std::mem::take(&mut self.leased);
            *self = StatsState::new(slots);
            self.leased = leases.into_iter().map(|lease| lease.map(|_| now)).collect();
            self.leased_count = self.leased.iter().flatten().count();
            self.metric_started = leased.then_some(now);
            self.busy_started = leased.then_some(now);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_has_torchrl_names_and_integer_counts() {
        let stats = ExchangeStats {
            batches: 2,
            items: 4,
            avg_batch_size: 2.0,
            avg_observation_to_batch: Duration::from_micros(1500),
            ..ExchangeStats::default()
        };
        let map = stats.to_map();
        assert_eq!(
            map.keys().copied().collect::<Vec<_>>(),
            [
                "avg_batch_size",
                "avg_batch_to_action_ms",
                "avg_observation_to_batch_ms",
                "batch_fill_ratio",
                "batches",
                "consumer_busy_fraction",
                "items",
                "partial_batch_fraction",
            ]
        );
        assert_eq!(map["batches"].to_string(), "2");
        assert_eq!(format!("{:.4}", map["items"]), "4");
        assert_eq!(map["avg_observation_to_batch_ms"], StatValue::Float(1.5));
        assert_eq!(map["avg_batch_size"].as_f64(), 2.0);
        assert!(stats
            .to_string()
            .starts_with("2 batches, 4 items (2.00 per batch)"));
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn no_batches_give_zeros() {
        let mut stats = StatsState::new(4);
        assert_eq!(stats.snapshot(10 * MS, false), ExchangeStats::default());
    }

    #[test]
    fn fill_and_partial_batches_count_max_get_or_the_batch_itself() {
        let mut stats = StatsState::new(8);
        // max_get 4, one came; max_get 3, three came; no max_get, two came.
        stats.record_received(10 * MS, [(0, 9 * MS)].into_iter(), Some(4), false);
        stats.record_received(
            20 * MS,
            [(1, 17 * MS), (2, 18 * MS), (3, 19 * MS)].into_iter(),
            Some(3),
            false,
        );
        stats.record_received(
            30 * MS,
            [(4, 30 * MS), (5, 30 * MS)].into_iter(),
            None,
            false,
        );
        let s = stats.snapshot(40 * MS, false);
        assert_eq!((s.batches, s.items), (3, 6));
        assert_eq!(s.avg_batch_size, 2.0);
        assert_eq!(s.batch_fill_ratio, 6.0 / 9.0);
        assert_eq!(s.partial_batch_fraction, 1.0 / 3.0);
        // (1 + 3 + 2 + 1 + 0 + 0) ms over 6 results.
        assert_eq!(s.avg_observation_to_batch, Duration::from_nanos(7 * MS / 6));
        assert_eq!(s.consumer_busy_fraction, 0.0);
        assert_eq!(s.avg_batch_to_action, Duration::ZERO);
    }

    #[test]
    fn the_consumer_is_busy_from_a_tracked_receive_until_every_action_is_sent() {
        let mut stats = StatsState::new(4);
        // Taken at 10 ms; actions at 12 ms (slot 0) and 14 ms (slot 1).
        stats.record_received(
            10 * MS,
            [(0, 10 * MS), (1, 10 * MS)].into_iter(),
            None,
            true,
        );
        stats.record_action(0, 12 * MS);
        stats.record_action(1, 14 * MS);
        // A command to a slot that was not leased changes nothing.
        stats.record_action(2, 15 * MS);
        let s = stats.snapshot(20 * MS, false);
        assert_eq!(s.avg_batch_to_action, Duration::from_millis(3));
        // Busy 4 ms of the 10 since the first receive.
        assert_eq!(s.consumer_busy_fraction, 0.4);
    }

    #[test]
    fn a_reset_keeps_leases_and_restarts_the_busy_period() {
        let mut stats = StatsState::new(2);
        stats.record_received(10 * MS, [(0, 10 * MS)].into_iter(), Some(1), true);
        let before = stats.snapshot(20 * MS, true);
        assert_eq!(before.batches, 1);
        assert_eq!(before.consumer_busy_fraction, 1.0);
        // Still leased: the busy period and the lease go on from 20 ms.
        stats.record_action(0, 25 * MS);
        let after = stats.snapshot(30 * MS, false);
        assert_eq!(after.batches, 0);
        assert_eq!(after.avg_batch_to_action, Duration::from_millis(5));
        assert_eq!(after.consumer_busy_fraction, 0.5);
    }

    #[test]
    fn display_reads_as_one_line() {
        let mut stats = StatsState::new(4);
        stats.record_received(MS, [(0, 0)].into_iter(), Some(4), false);
        stats.record_received(MS, [(1, 0), (2, 0), (3, 0)].into_iter(), Some(3), false);
        assert_eq!(
            stats.snapshot(MS, false).to_string(),
            "2 batches, 4 items (2.00 per batch), fill 57.1%, partial 50.0%, \
             observation to batch 1.000 ms, batch to action 0.000 ms, consumer busy 0.0%"
        );
    }
}
