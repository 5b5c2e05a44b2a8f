//! Entry points for the fuzz targets (`fuzz/` at the workspace root): the
//! control socket's decoders and framing, which are otherwise private to
//! this crate. Hidden from the docs and not part of the API.

use std::io;
use std::os::unix::net::UnixStream;

use envs::Kwargs;
use exchange::Schema;
use pool_core::{Op, Runner};
use rustix::net::SendFlags;

use crate::wire::{EnvEntry, FrameReader, FromWorker, ToWorker};

/// `bytes` read as a parent's message (`ToWorker`) and encoded again:
/// `None` when they are not one.
pub fn to_worker(bytes: &[u8]) -> Option<Vec<u8>> {
    ToWorker::decode(bytes).ok().map(|msg| msg.encode())
}

/// `bytes` read as a worker's message (`FromWorker`) and encoded again:
/// `None` when they are not one.
pub fn from_worker(bytes: &[u8]) -> Option<Vec<u8>> {
    FromWorker::decode(bytes).ok().map(|msg| msg.encode())
}

/// The frames that a `FrameReader` reads from a socket that carries
/// `stream` and is then closed: each frame's message, and the error that
/// stopped the reading (`None`: the stream ended between frames).
pub fn read_frames(stream: &[u8]) -> (Vec<Vec<u8>>, Option<io::Error>) {
    let (writer, reader) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(err) => return (Vec::new(), Some(err)),
    };
    // A stream that fits the socket's buffer is written at once (no thread
    // to wait for); the rest, if any, by a writer thread.
    let written = match writer.set_nonblocking(true) {
        Ok(()) => send_all(&writer, stream),
        Err(_) => 0,
    };
    let rest = &stream[written..];
    let mut reader = FrameReader::new(reader);
    std::thread::scope(|scope| {
        if !rest.is_empty() && writer.set_nonblocking(false).is_ok() {
            scope.spawn(move || send_all(&writer, rest));
        } else {
            drop(writer);
        }
        let mut frames = Vec::new();
        let end = loop {
            match reader.read() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break None,
                Err(err) => break Some(err),
            }
        };
        // Closes the socket, so that a writer still writing stops.
        drop(reader);
        (frames, end)
    })
}

/// Writes as much of `bytes` as the socket takes (all of it, if it
/// blocks); NOSIGNAL, as the reader may have stopped (and closed) first.
fn send_all(writer: &UnixStream, bytes: &[u8]) -> usize {
    let mut written = 0;
    while written < bytes.len() {
        match rustix::net::send(writer, &bytes[written..], SendFlags::NOSIGNAL) {
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    written
}

/// Encoded messages, each with a name.
pub type Samples = Vec<(&'static str, Vec<u8>)>;

/// Real messages of both directions (to a worker, from a worker), named,
/// for seed corpora: those a parent and a worker exchange for a CartPole
/// on either exchange.
pub fn sample_messages() -> (Samples, Samples) {
    let kwargs = Kwargs::new().with("seed", 7).with("max_episode_steps", 500);
    let mut env = envs::make("CartPole-v1", &kwargs).expect("CartPole-v1 is registered");
    let mut runner = Runner::new(&*env);
    runner
        .run(&mut *env, Op::Reset, false)
        .expect("CartPole resets");
    runner
        .run(&mut *env, Op::StepAndMaybeReset, true)
        .expect("CartPole steps");
    let schema = |td| Schema::from_template(td).expect("CartPole's buffers fit slots");
    let to = vec![
        (
            "hello",
            ToWorker::Hello {
                worker: 1,
                runners: 2,
                max_runners: 0,
                affinity: Some(vec![0, 1]),
                pin_required: true,
                envs: vec![
                    EnvEntry {
                        env: 2,
                        name: "CartPole-v1".into(),
                        kwargs: kwargs.to_bytes(),
                    },
                    EnvEntry {
                        env: 3,
                        name: "CountingEnv".into(),
                        kwargs: Kwargs::new().to_bytes(),
                    },
                ],
            },
        ),
        ("use-queue", ToWorker::UseQueue),
        (
            "use-shm",
            ToWorker::UseShm {
                input: schema(&runner.input).encode(),
                result: schema(&runner.next).encode(),
                next: schema(&runner.root).encode(),
            },
        ),
        (
            "command-step",
            ToWorker::Command {
                env: 2,
                op: Op::Step,
                input: tensordict::encode(&runner.input),
            },
        ),
        (
            "command-reset",
            ToWorker::Command {
                env: 0,
                op: Op::Reset,
                input: Vec::new(),
            },
        ),
        ("stop", ToWorker::Stop),
    ];
    let from = vec![
        ("pinned", FromWorker::Pinned { cpus: vec![0, 1] }),
        (
            "pin-failed",
            FromWorker::PinFailed {
                message: "CPU 9 is not available".into(),
            },
        ),
        (
            "built",
            FromWorker::Built {
                env: 2,
                name: env.name().to_owned(),
                specs: env.specs().to_bytes(),
                input: tensordict::encode(&runner.input),
                next: tensordict::encode(&runner.next),
                root: tensordict::encode(&runner.root),
            },
        ),
        (
            "build-failed",
            FromWorker::BuildFailed {
                env: 3,
                message: "no env named \"Nope\"".into(),
                panicked: false,
            },
        ),
        ("started", FromWorker::Started),
        (
            "result",
            FromWorker::Result {
                env: 2,
                next: tensordict::encode(&runner.next),
                root: tensordict::encode(&runner.root),
            },
        ),
        (
            "failed",
            FromWorker::Failed {
                env: 2,
                during: "step".into(),
                message: "boom".into(),
                panicked: true,
            },
        ),
        (
            "fatal",
            FromWorker::Fatal {
                message: "the exchange could not be opened".into(),
            },
        ),
    ];
    (
        to.into_iter().map(|(n, m)| (n, m.encode())).collect(),
        from.into_iter().map(|(n, m)| (n, m.encode())).collect(),
    )
}
