//! Starting workers: the program started again (`current_exe`) in worker
//! mode, its control socket as standard input, from one long-lived thread
//! so that the workers' parent-death signal follows the process, not the
//! thread that built a pool.

use std::ffi::OsString;
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

/// The environment variable that puts a program in worker mode:
/// `<worker index>:<parent pid>`.
pub(crate) const WORKER_VAR: &str = "RLPOOL_WORKER";

/// A worker to start: its program, arguments and control socket (the
/// child's end).
struct Request {
    command: Command,
    reply: Sender<io::Result<Child>>,
}

/// Sends start requests to the spawner thread, started on first use and
/// never stopped: Linux delivers the parent-death signal when the *thread*
/// that started a child exits, so children are started from a thread that
/// lives as long as the process.
fn spawner() -> io::Result<Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    if let Some(tx) = SPAWNER.get() {
        return Ok(pool_core::lock(tx).clone());
    }
    let (tx, rx) = mpsc::channel::<Request>();
    let started = std::thread::Builder::new()
        .name("rlpool-spawner".into())
        .spawn(move || {
            for mut request in rx {
                let _ = request.reply.send(request.command.spawn());
            }
        });
    started?;
    // Another thread may have won the race: its spawner serves both (this
    // one ends once `tx` is dropped).
    let tx = SPAWNER.get_or_init(|| Mutex::new(tx));
    Ok(pool_core::lock(tx).clone())
}

/// The program a worker runs: this one.
pub(crate) fn program() -> io::Result<PathBuf> {
    std::env::current_exe()
}

/// Starts worker `worker` of this process: `program args`, with
/// [`WORKER_VAR`] set and `socket` (the child's end) as its standard input.
pub(crate) fn start_worker(
    program: &PathBuf,
    args: &[OsString],
    worker: usize,
    socket: UnixStream,
    quiet: bool,
) -> io::Result<Child> {
    let mut command = Command::new(program);
    command
        .args(args)
        .env(WORKER_VAR, format!("{worker}:{}", std::process::id()))
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(socket)))
        // Its own process group: a Ctrl-C at the terminal reaches the
        // parent, which stops the workers in order, not the workers.
        .process_group(0);
    if quiet {
        command.stdout(Stdio::null());
    }
    let (reply, answer) = mpsc::channel();
    spawner()?
        .send(Request { command, reply })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
