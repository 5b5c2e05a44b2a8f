//! Faults of a worker's control socket, injected by the fault-matrix tests
//! (faults no env could cause). Compiled in only with the cargo feature
//! `fault-injection`, which only the tests enable: without it the keyword
//! is not special (an env that does not take it rejects it) and
//! [`SocketFault`] has no value.

use std::os::unix::net::UnixStream;

use envs::Kwargs;

/// The keyword (taken out of an env's keyword arguments before the env is
/// built) of a fault of the worker's control socket: `"close_socket@K"` (at
/// the env's K-th step command, the worker shuts its socket down) or
/// `"garbage@K"` (it writes a frame the parent cannot decode), in place of
/// running that step.
#[cfg(feature = "fault-injection")]
pub(crate) const WORKER_FAULT: &str = "rlpool_worker_fault";

/// A fault of the worker's control socket (see `WORKER_FAULT`). Without
/// the `fault-injection` feature it has no variant: no fault can be asked
/// for, and the code that injects one is unreachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SocketFault {
    /// Shut the socket down (both directions).
    #[cfg(feature = "fault-injection")]
    Close,
    /// Write a frame with an unknown message tag.
    #[cfg(feature = "fault-injection")]
    Garbage,
}

/// A frame no parent can decode: an unknown message tag.
#[cfg(feature = "fault-injection")]
const GARBAGE: &[u8] = &[0xEE, 0xBA, 0xAD, 0xF0, 0x0D];

impl SocketFault {
    /// Does it to the worker's end of the socket: the parent finds the end
    /// of the socket, or a frame it cannot decode.
    pub(crate) fn inject(self, stream: &UnixStream) {
        #[cfg(not(feature = "fault-injection"))]
        let _ = stream;
        match self {
            #[cfg(feature = "fault-injection")]
            SocketFault::Close => {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            #[cfg(feature = "fault-injection")]
            SocketFault::Garbage => {
                let _ = crate::wire::write_frame(stream, GARBAGE, &[]);
            }
        }
    }
}

/// Takes `WORKER_FAULT` out of `kwargs`: the fault and the step command it
/// replaces.
#[cfg(feature = "fault-injection")]
pub(crate) fn take_fault(kwargs: Kwargs) -> Result<(Kwargs, Option<(SocketFault, u64)>), String> {
    let Some(value) = kwargs.get(WORKER_FAULT) else {
        return Ok((kwargs, None));
    };
    let bad =
        || format!("{WORKER_FAULT}: expected \"close_socket@K\" or \"garbage@K\", got {value:?}");
    let text = match value {
        envs::KwValue::Str(text) => text.as_str(),
        _ => return Err(bad()),
    };
    let (name, at) = text.split_once('@').ok_or_else(bad)?;
    let fault = match name {
        "close_socket" => SocketFault::Close,
        "garbage" => SocketFault::Garbage,
        _ => return Err(bad()),
    };
    let at = at.parse::<u64>().map_err(|_| bad())?;
    let mut rest = Kwargs::new();
    for (key, value) in kwargs.iter().filter(|(key, _)| *key != WORKER_FAULT) {
        rest.set(key, value.clone());
    }
    Ok((rest, Some((fault, at))))
}

/// Without the `fault-injection` feature: the keyword arguments as they
/// are, no fault.
#[cfg(not(feature = "fault-injection"))]
pub(crate) fn take_fault(kwargs: Kwargs) -> Result<(Kwargs, Option<(SocketFault, u64)>), String> {
    Ok((kwargs, None))
}
