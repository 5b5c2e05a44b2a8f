//! The summary a run ends with: a few aligned lines for people, or one
//! JSON line for programs (`--json`).

use std::time::Duration;

use pool::{ExchangeStats, ResolvedExchange, StatValue};

use crate::args::BackendArg;
use crate::drive::Tally;
use crate::failure::Failure;
use crate::output::say;

/// What a run did.
#[derive(Debug)]
pub(crate) struct Summary<'a> {
    /// The registered env's name.
    pub(crate) env: &'a str,
    /// Number of envs.
    pub(crate) num_envs: usize,
    /// Where the envs ran.
    pub(crate) backend: BackendArg,
    /// The exchange in use: `None` for threads, which need none.
    pub(crate) exchange: Option<ResolvedExchange>,
    /// Why `--exchange auto` chose the queue, if it did.
    pub(crate) exchange_reason: Option<String>,
    /// Whether the run used the synchronous API.
    pub(crate) sync: bool,
    /// Results waited for per asynchronous receive; `None` for `--sync`.
    pub(crate) min_get: Option<usize>,
    /// Steps, episodes and returns.
    pub(crate) tally: Tally,
    /// How long the run stepped.
    pub(crate) elapsed: Duration,
    /// Whether Ctrl-C ended the run.
    pub(crate) interrupted: bool,
    /// The worker processes (empty for threads), reaped by now.
    pub(crate) worker_pids: Vec<u32>,
    /// The exchange statistics (none without shared memory).
    pub(crate) stats: Option<ExchangeStats>,
}

/// A resolved exchange as written in the summary.
fn exchange_name(exchange: ResolvedExchange) -> &'static str {
    match exchange {
        ResolvedExchange::Shm => "shm",
        ResolvedExchange::Queue => "queue",
    }
}

/// One statistic as text: a count as a whole number, anything else with
/// four decimals.
fn stat_text(value: StatValue) -> String {
    format!("{value:.4}")
}

/// One statistic as JSON: a count as an integer, anything else a number.
fn stat_json(value: StatValue) -> serde_json::Value {
    match value {
        StatValue::Count(n) => serde_json::json!(n),
        StatValue::Float(x) => serde_json::json!(x),
    }
}

impl Summary<'_> {
    /// Env-steps per second.
    fn rate(&self) -> f64 {
        self.tally.steps as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The summary as one JSON object.
    pub(crate) fn json(&self) -> serde_json::Value {
        let stats: serde_json::Map<String, serde_json::Value> = self
            .stats
            .iter()
            .flat_map(ExchangeStats::to_map)
            .map(|(name, value)| (name.to_owned(), stat_json(value)))
            .collect();
        serde_json::json!({
            "env": self.env,
            "num_envs": self.num_envs,
            "backend": self.backend.name(),
            "exchange": self.exchange.map(exchange_name),
            "mode": if self.sync { "sync" } else { "async" },
            "min_get": self.min_get,
            "steps": self.tally.steps,
            "seconds": self.elapsed.as_secs_f64(),
            "steps_per_second": self.rate(),
            "episodes": self.tally.episodes,
            "mean_return": self.tally.mean_return(),
            "interrupted": self.interrupted,
            "worker_pids": self.worker_pids,
            "exchange_reason": self.exchange_reason,
            "stats": stats,
        })
    }

    /// Prints the summary as one JSON line.
    pub(crate) fn print_json(&self) -> Result<(), Failure> {
        say!("{}", self.json())
    }

    /// Prints the summary as aligned lines.
    pub(crate) fn print_text(&self) -> Result<(), Failure> {
        if self.interrupted {
            say!("interrupted: the summary of what ran")?;
        }
        say!("steps:        {}", self.tally.steps)?;
        say!("time:         {:.2} s", self.elapsed.as_secs_f64())?;
        say!("throughput:   {:.0} env-steps/s", self.rate())?;
        say!("episodes:     {}", self.tally.episodes)?;
        if let Some(mean) = self.tally.mean_return() {
            say!("mean return:  {mean:.2}")?;
        }
        match (self.exchange, &self.exchange_reason) {
            (None, _) => say!("exchange:     none (threads share this process's memory)")?,
            (Some(exchange), Some(reason)) => say!(
                "exchange:     {} (auto chose it: {reason})",
                exchange_name(exchange)
            )?,
            (Some(exchange), None) => say!("exchange:     {}", exchange_name(exchange))?,
        }
        if let Some(stats) = &self.stats {
            say!("stats:")?;
            for (name, value) in stats.to_map() {
                say!("  {name:<28} {}", stat_text(value))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_numbers_and_ratios_keep_decimals() {
        assert_eq!(stat_text(StatValue::Count(377000)), "377000");
        assert_eq!(stat_text(StatValue::Count(12)), "12");
        assert_eq!(stat_text(StatValue::Float(0.5)), "0.5000");
        assert_eq!(
            stat_json(StatValue::Count(377000)),
            serde_json::json!(377000)
        );
        assert!(stat_json(StatValue::Count(3)).is_u64());
        assert!(stat_json(StatValue::Float(8.0)).is_f64());
    }

    #[test]
    fn threads_have_no_exchange() {
        let summary = Summary {
            env: "CountingEnv",
            num_envs: 2,
            backend: BackendArg::Threads,
            exchange: None,
            exchange_reason: None,
            sync: true,
            min_get: None,
            tally: Tally::default(),
            elapsed: Duration::from_secs(1),
            interrupted: false,
            worker_pids: Vec::new(),
            stats: None,
        };
        let json = summary.json();
        assert_eq!(json["exchange"], serde_json::Value::Null);
        assert_eq!(json["backend"], "threads");
        assert_eq!(json["mean_return"], serde_json::Value::Null);
        assert_eq!(json["min_get"], serde_json::Value::Null);
        assert_eq!(json["mode"], "sync");
        assert_eq!(exchange_name(ResolvedExchange::Shm), "shm");
        assert_eq!(exchange_name(ResolvedExchange::Queue), "queue");
    }
}
