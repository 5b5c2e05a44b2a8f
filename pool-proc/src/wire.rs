//! The control socket's messages ([`ToWorker`], [`FromWorker`]), their
//! encoding, and the framing that carries them (a little-endian `u32`
//! length, then the message; a descriptor rides along with `SCM_RIGHTS`).
//!
//! Decoding never panics and never allocates more than the bytes it was
//! given: it reads with [`tensordict::ByteReader`], which checks every
//! length and count against what remains; its failures are [`WireError`]s
//! naming the field and its offset.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use pool_core::Op;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tensordict::{ByteReader, ReadError};

/// The longest frame either side accepts (a tensordict of a queue exchange
/// included): a length above it is a protocol error, not an allocation.
pub(crate) const MAX_FRAME: usize = 1 << 30;

/// An env for a worker to build: its index in the pool, its registry name
/// and its keyword arguments (`Kwargs::to_bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EnvEntry {
    pub(crate) env: u32,
    pub(crate) name: String,
    pub(crate) kwargs: Vec<u8>,
}

/// The parent's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToWorker {
    /// The first message: who the worker is, where to pin it, what to build.
    Hello {
        worker: u32,
        /// Threads that run its envs (at most one per env).
        runners: u32,
        /// The most runners it may have, spares included (0: one per env).
        max_runners: u32,
        affinity: Option<Vec<u32>>,
        /// Whether a worker that cannot pin itself to `affinity` fails
        /// (the user asked for it), or runs where it is (the pool spread its
        /// workers over the CPUs of its own accord).
        pin_required: bool,
        envs: Vec<EnvEntry>,
    },
    /// Commands and results travel over this socket.
    UseQueue,
    /// Commands and results travel through the exchange whose descriptor
    /// rides with this message, followed by the descriptor of the workers'
    /// doorbells (`Bells`; the worker's is its index); the schemas are
    /// `Schema::encode`d.
    UseShm {
        input: Vec<u8>,
        result: Vec<u8>,
        next: Vec<u8>,
    },
    /// Queue exchange: run `op` on `env`, with the encoded input (empty:
    /// none, for a reset without state).
    Command { env: u32, op: Op, input: Vec<u8> },
    /// Stop every env and exit.
    Stop,
}

/// The worker's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FromWorker {
    /// The worker pinned itself: the CPUs it now runs on.
    Pinned { cpus: Vec<u32> },
    /// The worker could not pin itself.
    PinFailed { message: String },
    /// An env was built: its name, specs (`EnvSpecs::to_bytes`) and encoded
    /// buffers (input, step result, next root).
    Built {
        env: u32,
        name: String,
        specs: Vec<u8>,
        input: Vec<u8>,
        next: Vec<u8>,
        root: Vec<u8>,
    },
    /// An env could not be built.
    BuildFailed {
        env: u32,
        message: String,
        panicked: bool,
    },
    /// The exchange is set up; commands may come.
    Started,
    /// Queue exchange: an env's result (encoded step result and root; each
    /// empty when the op does not make it).
    Result {
        env: u32,
        next: Vec<u8>,
        root: Vec<u8>,
    },
    /// An env failed or panicked running a command.
    Failed {
        env: u32,
        during: String,
        message: String,
        panicked: bool,
    },
    /// The worker cannot go on (its exchange could not be opened, a message
    /// it could not read): it exits after sending this.
    Fatal { message: String },
}

const HELLO: u8 = 1;
const USE_QUEUE: u8 = 2;
const USE_SHM: u8 = 3;
const COMMAND: u8 = 4;
const STOP: u8 = 5;

const PINNED: u8 = 101;
const PIN_FAILED: u8 = 102;
const BUILT: u8 = 103;
const BUILD_FAILED: u8 = 104;
const STARTED: u8 = 105;
const RESULT: u8 = 106;
const FAILED: u8 = 107;
const FATAL: u8 = 108;

/// An op's code on the wire (and in the exchange's command word, offset by
/// `FIRST_COMMAND`).
pub(crate) fn op_code(op: Op) -> u8 {
    match op {
        Op::Reset => 0,
        Op::Step => 1,
        Op::StepAndMaybeReset => 2,
    }
}

/// The op of a code from [`op_code`].
pub(crate) fn op_of(code: u8) -> Option<Op> {
    match code {
        0 => Some(Op::Reset),
        1 => Some(Op::Step),
        2 => Some(Op::StepAndMaybeReset),
        _ => None,
    }
}

/// Appends fields to a message.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.u32(v.len() as u32);
        for &x in v {
            self.u32(x);
        }
        self
    }
}

/// Why bytes are not a message of the control socket. Each message names
/// the field being read and its byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// A field that could not be read: the bytes end first, a count or
    /// length that cannot fit in the bytes that remain, a string that is
    /// not UTF-8, or bytes left over after the message.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A first byte that is no message's tag.
    #[error("unknown message tag {tag}")]
    UnknownTag {
        /// The byte.
        tag: u8,
    },
    /// A flag byte other than 0 or 1.
    #[error("{what} at byte {at}: {value} is not a bool")]
    NotBool {
        /// The field.
        what: &'static str,
        /// Its offset.
        at: usize,
        /// The byte.
        value: u8,
    },
    /// A hello's affinity flag other than 0 (none), 1 (a required pin) or
    /// 2 (a pin at best).
    #[error("{what} at byte {at}: unknown value {value}")]
    UnknownFlag {
        /// The field.
        what: &'static str,
        /// Its offset.
        at: usize,
        /// The byte.
        value: u8,
    },
    /// An op code that [`op_of`] does not know.
    #[error("op at byte {at}: unknown code {code}")]
    UnknownOp {
        /// The code.
        code: u8,
        /// Its offset.
        at: usize,
    },
}

/// Reads fields of a message with a [`ByteReader`]; every error says what
/// and where.
struct In<'a>(ByteReader<'a>);

impl In<'_> {
    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.0.u8(what)?)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(self.0.u32(what)?)
    }
    /// A count of items that each take at least `min_item` bytes.
    fn count(&mut self, what: &'static str, min_item: usize) -> Result<usize, WireError> {
        Ok(self.0.count::<u32>(what, min_item)?)
    }
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        Ok(self.0.bytes::<u32>(what)?.to_vec())
    }
    fn str(&mut self, what: &'static str) -> Result<String, WireError> {
        Ok(self.0.str::<u32>(what)?.to_owned())
    }
    fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        let at = self.0.position();
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(WireError::NotBool { what, at, value }),
        }
    }
    fn u32s(&mut self, what: &'static str) -> Result<Vec<u32>, WireError> {
        let n = self.count(what, 4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.u32(what)?);
        }
        Ok(out)
    }
    fn op(&mut self) -> Result<Op, WireError> {
        let at = self.0.position();
        let code = self.u8("op")?;
        op_of(code).ok_or(WireError::UnknownOp { code, at })
    }
    fn end(&self) -> Result<(), WireError> {
        Ok(self.0.finish("the message")?)
    }
}

impl ToWorker {
    /// The message's bytes (without the frame's length).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Out::default();
        match self {
            ToWorker::Hello {
                worker,
                runners,
                max_runners,
                affinity,
                pin_required,
                envs,
            } => {
                out.u8(HELLO).u32(*worker).u32(*runners).u32(*max_runners);
                match affinity {
                    None => out.u8(0),
                    Some(cpus) => out.u8(if *pin_required { 1 } else { 2 }).u32s(cpus),
                };
                out.u32(envs.len() as u32);
                for e in envs {
                    out.u32(e.env).str(&e.name).bytes(&e.kwargs);
                }
            }
            ToWorker::UseQueue => {
                out.u8(USE_QUEUE);
            }
            ToWorker::UseShm {
                input,
                result,
                next,
            } => {
                out.u8(USE_SHM).bytes(input).bytes(result).bytes(next);
            }
            ToWorker::Command { env, op, input } => {
                out.u8(COMMAND).u32(*env).u8(op_code(*op)).bytes(input);
            }
            ToWorker::Stop => {
                out.u8(STOP);
            }
        }
        out.0
    }

    /// Reads a message made by [`ToWorker::encode`]; an error says what is
    /// wrong and where.
    pub(crate) fn decode(bytes: &[u8]) -> Result<ToWorker, WireError> {
        let mut r = In(ByteReader::new(bytes));
        let msg = match r.u8("tag")? {
            HELLO => {
                let worker = r.u32("worker")?;
                let runners = r.u32("runners")?;
                let max_runners = r.u32("max runners")?;
                let at = r.0.position();
                let (affinity, pin_required) = match r.u8("affinity flag")? {
                    0 => (None, false),
                    flag @ (1 | 2) => (Some(r.u32s("affinity")?), flag == 1),
                    value => {
                        return Err(WireError::UnknownFlag {
                            what: "affinity flag",
                            at,
                            value,
                        })
                    }
                };
                // Smallest env: its index and two empty strings' lengths.
                let n = r.count("env count", 12)?;
                let mut envs = Vec::with_capacity(n);
                for _ in 0..n {
                    envs.push(EnvEntry {
                        env: r.u32("env")?,
                        name: r.str("env name")?,
                        kwargs: r.bytes("kwargs")?,
                    });
                }
                ToWorker::Hello {
                    worker,
                    runners,
                    max_runners,
                    affinity,
                    pin_required,
                    envs,
                }
            }
            USE_QUEUE => ToWorker::UseQueue,
            USE_SHM => ToWorker::UseShm {
                input: r.bytes("input schema")?,
                result: r.bytes("result schema")?,
                next: r.bytes("next schema")?,
            },
            COMMAND => ToWorker::Command {
                env: r.u32("env")?,
                op: r.op()?,
                input: r.bytes("input")?,
            },
            STOP => ToWorker::Stop,
            tag => return Err(WireError::UnknownTag { tag }),
        };
        r.end()?;
        Ok(msg)
    }
}

impl FromWorker {
    /// The message's bytes (without the frame's length).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Out::default();
        match self {
            FromWorker::Pinned { cpus } => {
                out.u8(PINNED).u32s(cpus);
            }
            FromWorker::PinFailed { message } => {
                out.u8(PIN_FAILED).str(message);
            }
            FromWorker::Built {
                env,
                name,
                specs,
                input,
                next,
                root,
            } => {
                out.u8(BUILT)
                    .u32(*env)
                    .str(name)
                    .bytes(specs)
                    .bytes(input)
                    .bytes(next)
                    .bytes(root);
            }
            FromWorker::BuildFailed {
                env,
                message,
                panicked,
            } => {
                out.u8(BUILD_FAILED)
                    .u32(*env)
                    .str(message)
                    .u8(u8::from(*panicked));
            }
            FromWorker::Started => {
                out.u8(STARTED);
            }
            FromWorker::Result { env, next, root } => {
                out.u8(RESULT).u32(*env).bytes(next).bytes(root);
            }
            FromWorker::Failed {
                env,
                during,
                message,
                panicked,
            } => {
                out.u8(FAILED)
                    .u32(*env)
                    .str(during)
                    .str(message)
                    .u8(u8::from(*panicked));
            }
            FromWorker::Fatal { message } => {
                out.u8(FATAL).str(message);
            }
        }
        out.0
    }

    /// Reads a message made by [`FromWorker::encode`]; an error says what
    /// is wrong and where.
    pub(crate) fn decode(bytes: &[u8]) -> Result<FromWorker, WireError> {
        let mut r = In(ByteReader::new(bytes));
        let msg = match r.u8("tag")? {
            PINNED => FromWorker::Pinned {
                cpus: r.u32s("cpus")?,
            },
            PIN_FAILED => FromWorker::PinFailed {
                message: r.str("message")?,
            },
            BUILT => FromWorker::Built {
                env: r.u32("env")?,
                name: r.str("env name")?,
                specs: r.bytes("specs")?,
                input: r.bytes("input template")?,
                next: r.bytes("next template")?,
                root: r.bytes("root template")?,
            },
            BUILD_FAILED => FromWorker::BuildFailed {
                env: r.u32("env")?,
                message: r.str("message")?,
                panicked: r.bool("panicked")?,
            },
            STARTED => FromWorker::Started,
            RESULT => FromWorker::Result {
                env: r.u32("env")?,
                next: r.bytes("next")?,
                root: r.bytes("root")?,
            },
            FAILED => FromWorker::Failed {
                env: r.u32("env")?,
                during: r.str("during")?,
                message: r.str("message")?,
                panicked: r.bool("panicked")?,
            },
            FATAL => FromWorker::Fatal {
                message: r.str("message")?,
            },
            tag => return Err(WireError::UnknownTag { tag }),
        };
        r.end()?;
        Ok(msg)
    }
}

/// Writes one frame (and `fds`, at most 4, with `SCM_RIGHTS`). A frame is
/// written whole by one call under the caller's lock, so frames of several
/// threads never interleave.
pub(crate) fn write_frame(
    stream: &UnixStream,
    msg: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if msg.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a frame of {} bytes is over the limit", msg.len()),
        ));
    }
    let len = (msg.len() as u32).to_le_bytes();
    let mut written = 0;
    if !fds.is_empty() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if fds.len() > 4 || !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} descriptors in one frame, over the limit of 4",
                    fds.len()
                ),
            ));
        }
        written = rustix::net::sendmsg(
            stream,
            &[IoSlice::new(&len), IoSlice::new(msg)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
    }
    let mut whole = Vec::with_capacity(4 + msg.len());
    whole.extend_from_slice(&len);
    whole.extend_from_slice(msg);
    (&*stream).write_all(&whole[written..])
}

/// Reads frames from a socket, keeping the descriptors that arrive with
/// them.
#[derive(Debug)]
pub(crate) struct FrameReader {
    stream: UnixStream,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl FrameReader {
    pub(crate) fn new(stream: UnixStream) -> FrameReader {
        FrameReader {
            stream,
            buf: Vec::new(),
            fds: VecDeque::new(),
        }
    }

    pub(crate) fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// The oldest descriptor received and not yet taken.
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }

    /// The next frame's message; `Ok(None)` at end of stream between
    /// frames. A stream that ends inside a frame, or a length over
    /// [`MAX_FRAME`], is an error. Blocks (up to the socket's read timeout).
    pub(crate) fn read(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            let mut frame = ByteReader::new(&self.buf);
            // A read that fails here is a frame not received whole yet.
            if let Ok(len) = frame.u32("frame length") {
                let len = len as usize;
                if len > MAX_FRAME {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a frame of {len} bytes announced, over the limit"),
                    ));
                }
                if let Ok(msg) = frame.take(len, "frame") {
                    let msg = msg.to_vec();
                    let end = frame.position();
                    self.buf.drain(..end);
                    return Ok(Some(msg));
                }
            }
            if self.fill()? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the stream ended inside a frame ({} bytes)", self.buf.len()),
                    ))
                };
            }
        }
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = loop {
            match rustix::net::recvmsg(
                self.stream.as_fd(),
                &mut [IoSliceMut::new(&mut chunk)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(r) => break r,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                self.fds.extend(fds);
            }
        }
        self.buf.extend_from_slice(&chunk[..received.bytes]);
        Ok(received.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages() -> (Vec<ToWorker>, Vec<FromWorker>) {
        let to = vec![
            ToWorker::Hello {
                worker: 3,
                runners: 2,
                max_runners: 0,
                affinity: Some(vec![0, 1]),
                pin_required: true,
                envs: vec![EnvEntry {
                    env: 7,
                    name: "CartPole-v1".into(),
                    kwargs: vec![1, 2, 3],
                }],
            },
            ToWorker::Hello {
                worker: 0,
                runners: 1,
                max_runners: 1,
                affinity: Some(vec![1]),
                pin_required: false,
                envs: Vec::new(),
            },
            ToWorker::Hello {
                worker: 0,
                runners: 1,
                max_runners: 1,
                affinity: None,
                pin_required: false,
                envs: Vec::new(),
            },
            ToWorker::UseQueue,
            ToWorker::UseShm {
                input: vec![1],
                result: vec![2, 2],
                next: Vec::new(),
            },
            ToWorker::Command {
                env: 2,
                op: Op::StepAndMaybeReset,
                input: vec![9; 10],
            },
            ToWorker::Stop,
        ];
        let from = vec![
            FromWorker::Pinned { cpus: vec![0] },
            FromWorker::PinFailed {
                message: "no".into(),
            },
            FromWorker::Built {
                env: 1,
                name: "x".into(),
                specs: vec![1],
                input: vec![2],
                next: vec![3],
                root: vec![4],
            },
            FromWorker::BuildFailed {
                env: 1,
                message: "bad".into(),
                panicked: true,
            },
            FromWorker::Started,
            FromWorker::Result {
                env: 5,
                next: vec![1, 2],
                root: Vec::new(),
            },
            FromWorker::Failed {
                env: 5,
                during: "step".into(),
                message: "boom".into(),
                panicked: false,
            },
            FromWorker::Fatal {
                message: "gone".into(),
            },
        ];
        (to, from)
    }

    #[test]
    fn every_message_round_trips() {
        let (to, from) = messages();
        for m in to {
            assert_eq!(ToWorker::decode(&m.encode()).unwrap(), m);
        }
        for m in from {
            assert_eq!(FromWorker::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn truncated_or_extended_messages_are_errors_naming_the_field() {
        let (to, from) = messages();
        for m in to {
            let bytes = m.encode();
            for cut in 0..bytes.len() {
                assert!(ToWorker::decode(&bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            let err = ToWorker::decode(&longer).unwrap_err();
            assert!(
                matches!(
                    err,
                    WireError::Read(ReadError::TrailingBytes { count: 1, .. })
                ),
                "{err}"
            );
            assert!(err.to_string().contains("left over"), "{err}");
        }
        for m in from {
            let bytes = m.encode();
            for cut in 0..bytes.len() {
                assert!(FromWorker::decode(&bytes[..cut]).is_err());
            }
        }
        assert_eq!(
            ToWorker::decode(&[99]).unwrap_err().to_string(),
            "unknown message tag 99"
        );
        let err = ToWorker::decode(&[COMMAND, 0, 0, 0, 0, 9, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(err.to_string(), "op at byte 5: unknown code 9");
        // A count far above the bytes left allocates nothing.
        let err = FromWorker::decode(&[PINNED, 255, 255, 255, 255])
            .unwrap_err()
            .to_string();
        assert!(err.contains("do not fit"), "{err}");
        // So does an env count, and a length.
        let mut hello = vec![HELLO];
        // worker, runners, max runners; no affinity.
        hello.extend_from_slice(&[0; 12]);
        hello.push(0);
        hello.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = ToWorker::decode(&hello).unwrap_err().to_string();
        assert_eq!(
            err,
            "env count at byte 14: 4294967295 items of at least 12 bytes each do not fit \
             in the 0 bytes that remain"
        );
        let err = FromWorker::decode(&[FATAL, 9, 0, 0, 0, b'x']).unwrap_err();
        assert!(
            matches!(
                err,
                WireError::Read(ReadError::CountTooLarge {
                    what: "message",
                    at: 1,
                    ..
                })
            ),
            "{err}"
        );
        // Fields name themselves and their offset.
        let err = FromWorker::decode(&[BUILD_FAILED, 0, 0, 0, 0, 1, 0, 0, 0, b'x', 2]).unwrap_err();
        assert_eq!(err.to_string(), "panicked at byte 10: 2 is not a bool");
        let err = FromWorker::decode(&[PIN_FAILED, 2, 0, 0, 0, 0xff, 0xfe]).unwrap_err();
        assert_eq!(err.to_string(), "invalid UTF-8 in message at byte 5");
        let err = FromWorker::decode(&[RESULT, 1, 0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "truncated: env at byte 1 needs 4 bytes but 2 remain"
        );
    }

    #[test]
    fn frames_carry_messages_and_a_descriptor() {
        let (a, b) = UnixStream::pair().unwrap();
        let (keep, _other) = UnixStream::pair().unwrap();
        write_frame(&a, &[1, 2, 3], &[]).unwrap();
        write_frame(&a, &[4; 100_000], &[keep.as_fd(), keep.as_fd()]).unwrap();
        write_frame(&a, &[], &[]).unwrap();
        drop(a);
        let mut reader = FrameReader::new(b);
        assert_eq!(reader.read().unwrap(), Some(vec![1, 2, 3]));
        assert_eq!(reader.read().unwrap(), Some(vec![4; 100_000]));
        assert!(reader.take_fd().is_some());
        assert!(reader.take_fd().is_some());
        assert!(reader.take_fd().is_none());
        assert_eq!(reader.read().unwrap(), Some(vec![]));
        assert_eq!(reader.read().unwrap(), None);
    }

    #[test]
    fn a_frame_cut_short_or_too_long_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&[10, 0, 0, 0, 1]).unwrap();
        drop(a);
        let err = FrameReader::new(b).read().unwrap_err();
        assert!(err.to_string().contains("inside a frame"), "{err}");
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        let err = FrameReader::new(b).read().unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
}
