//! `Failure`: why a command stopped before its end, and the exit status
//! each reason gets.

use std::io::Write as _;
use std::process::ExitCode;

/// Why a command stopped before its end.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad arguments: one line on stderr, status 2.
    Usage(anyhow::Error),
    /// The run failed: one line on stderr, status 1.
    Failed(anyhow::Error),
    /// Whoever read stdout closed it (`rlpool envs | head -1`): the program
    /// ends quietly with status 0, as other command-line tools do.
    StdoutClosed,
}

/// Bad arguments (status 2).
pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(error.into())
}

/// A run that failed (status 1).
pub(crate) fn failed(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Failed(error.into())
}

impl Failure {
    /// Writes the failure's one line to stderr (nothing for a closed
    /// stdout) and returns the exit status.
    pub(crate) fn report(self) -> ExitCode {
        let (status, error) = match self {
            Failure::Usage(error) => (2, error),
            Failure::Failed(error) => (1, error),
            Failure::StdoutClosed => return ExitCode::SUCCESS,
        };
        // A closed stderr leaves nowhere to say it: the status still does.
        let _ = writeln!(std::io::stderr(), "rlpool: {error:#}");
        ExitCode::from(status)
    }
}
