//! `PoolStats`: what [`AsyncEnvPool::stats`](crate::AsyncEnvPool::stats)
//! returns (batches, items, fill, latencies), with TorchRL's names for
//! printing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The exchange statistics of a pool, as TorchRL's
/// `AsyncEnvPool.stats()` reports them: counts since the last reset, and
/// the averages and fractions derived from them. Only a pool with the
/// shared-memory exchange keeps them (as in TorchRL).
///
/// ```
/// use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, StatValue};
/// use pool::envs::Kwargs;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # pool::init();
/// let pool = AsyncEnvPool::builder()
///     .backend(Backend::Multiprocessing(ProcOptions::default().exchange(ExchangeMode::Shm)))
///     .registered_n("CountingEnv", 2, Kwargs::new())
///     .build()?;
/// pool.reset(None)?;
/// let stats = pool.stats(false).expect("the shm exchange keeps statistics");
/// assert_eq!((stats.batches, stats.items), (1, 2));
/// // TorchRL's names, counts as integers.
/// assert_eq!(stats.to_map()["items"], StatValue::Count(2));
/// println!("{stats}");
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Receives that returned results (a per-env receive counts as a batch
    /// of one).
    pub batches: u64,
    /// Results they returned.
    pub items: u64,
    /// `items / batches` (0 without batches).
    pub avg_batch_size: f64,
    /// `items` over the batches' capacity: each batch counts its `max_get`,
    /// or its own size when it had none (0 without batches).
    pub batch_fill_ratio: f64,
    /// Fraction of the batches that returned fewer than their `max_get`.
    pub partial_batch_fraction: f64,
    /// Mean time from a result's publication to the receive that took it.
    pub avg_observation_to_batch: Duration,
    /// Mean time from the receive that took an env's result to the next
    /// action sent to it.
    pub avg_batch_to_action: Duration,
    /// Fraction of the time since the first receive during which at least
    /// one taken result waited for its action.
    pub consumer_busy_fraction: f64,
}

/// One value of [`PoolStats::to_map`]: a count, or a ratio or average.
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

impl PoolStats {
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

impl From<exchange::ExchangeStats> for PoolStats {
    fn from(s: exchange::ExchangeStats) -> PoolStats {
        PoolStats {
            batches: s.batches,
            items: s.items,
            avg_batch_size: s.avg_batch_size,
            batch_fill_ratio: s.batch_fill_ratio,
            partial_batch_fraction: s.partial_batch_fraction,
            avg_observation_to_batch: s.avg_observation_to_batch,
            avg_batch_to_action: s.avg_batch_to_action,
            consumer_busy_fraction: s.consumer_busy_fraction,
        }
    }
}

/// One line: `2 batches, 4 items (2.00 per batch), fill 57.1%, partial
/// 50.0%, observation to batch 0.012 ms, batch to action 0.000 ms, consumer
/// busy 0.0%`.
impl fmt::Display for PoolStats {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_has_torchrl_names_and_integer_counts() {
        let stats = PoolStats {
            batches: 2,
            items: 4,
            avg_batch_size: 2.0,
            avg_observation_to_batch: Duration::from_micros(1500),
            ..PoolStats::default()
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
}
