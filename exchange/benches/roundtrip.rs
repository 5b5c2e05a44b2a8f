//! Round trips between two processes: the baseline a shared-memory slot
//! must beat (a Unix socket), and a plain memcpy of an Atari-sized record.
//! (A pipe round trip is still to come: the first version stalled under
//! divan and was left out.) A child process (this benchmark binary, started again
//! with `RLPOOL_BENCH_CHILD` set) echoes every record back.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};

use divan::{black_box, Bencher};

/// A CartPole step: observation f32[4], reward f32[1], three bool flags,
/// padded to 8-byte fields.
const CARTPOLE: usize = 16 + 8 + 3 * 8;
/// An Atari frame stack: u8[84, 84, 4].
const ATARI: usize = 84 * 84 * 4;

const CHILD: &str = "RLPOOL_BENCH_CHILD";

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    divan::main();
}

/// The child: `socket:<fd>:<size>`; echoes records of `size` bytes until
/// end of input.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let fd = |i: usize| parts[i].parse::<i32>().expect("an fd number");
    let (mut input, mut output, size): (Box<dyn Read>, Box<dyn Write>, usize) = match parts[0] {
        "socket" => {
            // SAFETY: the parent passed this descriptor to us open and
            // without close-on-exec; nothing else in this process owns it.
            let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd(1)) });
            let writer = stream.try_clone().expect("clone the socket");
            (
                Box::new(stream),
                Box::new(writer),
                parts[2].parse().expect("a size"),
            )
        }
        "pipe" => {
            // SAFETY: as above, for the two pipe ends.
            let reader = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd(1)) });
            // SAFETY: as above.
            let writer = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd(2)) });
            (
                Box::new(reader),
                Box::new(writer),
                parts[3].parse().expect("a size"),
            )
        }
        other => panic!("unknown child mode {other}"),
    };
    let mut buf = vec![0u8; size];
    while input.read_exact(&mut buf).is_ok() {
        if output.write_all(&buf).is_err() {
            break;
        }
    }
}

/// Clears close-on-exec so that a child inherits the descriptor.
fn inheritable(fd: &impl std::os::fd::AsFd) {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).expect("clear FD_CLOEXEC");
}

fn spawn(spec: String) -> Child {
    Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD, spec)
        .spawn()
        .expect("start the echo child")
}

fn round_trip(
    bencher: Bencher<'_, '_>,
    reader: &mut impl Read,
    writer: &mut impl Write,
    size: usize,
) {
    let out = vec![7u8; size];
    let mut back = vec![0u8; size];
    bencher.bench_local(|| {
        writer.write_all(black_box(&out)).expect("write");
        reader.read_exact(&mut back).expect("read");
    });
}

/// A Unix-socket round trip of one record.
#[divan::bench(args = [CARTPOLE, ATARI])]
fn unix_socket(bencher: Bencher<'_, '_>, size: usize) {
    let (mine, theirs) = UnixStream::pair().expect("a socket pair");
    inheritable(&theirs);
    let mut child = spawn(format!("socket:{}:{size}", theirs.as_raw_fd()));
    drop(theirs);
    let mut writer = mine.try_clone().expect("clone");
    let mut reader = mine;
    round_trip(bencher, &mut reader, &mut writer, size);
    drop(writer);
    let _ = reader.shutdown(std::net::Shutdown::Both);
    let _ = child.wait();
}

/// A plain copy of an Atari-sized record, for scale.
#[divan::bench]
fn memcpy_atari(bencher: Bencher<'_, '_>) {
    let src = vec![7u8; ATARI];
    let mut dst = vec![0u8; ATARI];
    bencher.bench_local(|| dst.copy_from_slice(black_box(&src)));
}
