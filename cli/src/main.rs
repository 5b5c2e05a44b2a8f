//! `rlpool`, the project's main program: a pool of registered environments
//! run with random actions, a live progress display and a summary
//! (`rlpool` alone, or `rlpool run ...`); a benchmark of pool
//! configurations (`rlpool bench`); the registered environments with their
//! specs (`rlpool envs`).
//!
//! Bad arguments print one line and exit with status 2; a run that fails
//! exits with status 1; Ctrl-C ends a run cleanly (summary, workers
//! stopped and reaped); a closed stdout (`rlpool envs | head -1`) ends the
//! program quietly with status 0.
//!
//! Worker processes of a process pool are this program started again:
//! `main` calls [`pool::init`] first, which runs the worker and never
//! returns in a worker process.
#![forbid(unsafe_code)]

mod args;
mod bench;
mod drive;
mod failure;
mod listing;
mod output;
mod progress;
mod run;
mod summary;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command, RunArgs};

fn main() -> ExitCode {
    // A worker process of a process pool runs here and never returns.
    pool::init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            // --help, --version: the text, and success (also when stdout is
            // closed).
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            // One line: clap's first ("error: ..."), without the usage block.
            let text = err.kind().to_string();
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or(&text).trim();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let _ = writeln!(std::io::stderr(), "rlpool: {first} (see rlpool --help)");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        None => run::run(&RunArgs::default()),
        Some(Command::Run(args)) => run::run(&args),
        Some(Command::Bench(args)) => bench::bench(&args),
        Some(Command::Envs) => listing::list(),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
