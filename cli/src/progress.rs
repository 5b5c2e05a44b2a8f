//! The live progress line of a run (indicatif, on stderr): steps,
//! throughput, episodes and mean return, refreshed a few times a second.

use std::time::{Duration, Instant};

use crate::drive::Tally;

/// Time between two refreshes of the line.
const REFRESH: Duration = Duration::from_millis(100);

/// A spinner with the run's running figures, or nothing when hidden.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: indicatif::ProgressBar,
    start: Instant,
    shown: Instant,
}

impl Progress {
    /// A progress line for a run that started at `start`; `visible: false`
    /// shows nothing (JSON output, benchmarks).
    pub(crate) fn new(visible: bool, start: Instant) -> Self {
        let bar = if visible {
            indicatif::ProgressBar::new_spinner()
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        Self {
            bar,
            start,
            shown: start,
        }
    }

    /// Refreshes the line if it was last refreshed [`REFRESH`] ago.
    pub(crate) fn show(&mut self, tally: &Tally) {
        if self.shown.elapsed() < REFRESH {
            return;
        }
        self.shown = Instant::now();
        let rate = tally.steps as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        let mean = tally
            .mean_return()
            .map_or("-".to_owned(), |m| format!("{m:.2}"));
        self.bar.set_message(format!(
            "{} steps, {rate:.0} steps/s, {} episodes, mean return {mean}",
            tally.steps, tally.episodes
        ));
        self.bar.tick();
    }

    /// Removes the line.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
