//! Writing to stdout: every line the program prints goes through
//! [`print_line`] (the [`say!`] macro), so a closed stdout ends the program
//! quietly where `println!` would panic.

use std::fmt;
use std::io::{self, Write as _};

use crate::failure::{failed, Failure};

/// Writes one line to stdout. A closed stdout (broken pipe) is
/// [`Failure::StdoutClosed`]; any other write error fails the command.
pub(crate) fn print_line(text: fmt::Arguments<'_>) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Err(Failure::StdoutClosed),
        Err(err) => Err(failed(anyhow::Error::new(err).context("writing to stdout"))),
    }
}

/// `println!` for this program: `say!("{x}")?` writes one line through
/// [`print_line`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::print_line(format_args!($($arg)*))
    };
}
pub(crate) use say;
