//! Worker mode: what a worker process runs. [`init`] at the top of the
//! program's `main` turns a process started by the backend into a worker
//! and never returns there; in any other process it returns at once.
//!
//! A worker reads its control socket (its standard input): the hello (its
//! CPUs, envs and number of runner threads), then the exchange to use, then
//! commands (queue exchange) or nothing until stop (shm exchange, where
//! commands come through the slots and the parent rings the worker's
//! doorbell once per send). Runner threads take commands and run the envs,
//! one thread per env at most, as many as the worker has CPUs by default:
//! envs of one worker step in parallel up to its cores without a thread
//! wake-up per env-step. A runner in a long (or stuck) env step holds
//! nothing back: the commands it has not taken stay where any runner
//! finds them, and a watcher thread starts a spare runner when every
//! runner is inside an env, none has started one for [`STALL`], and
//! commands wait; with the shm exchange it also rings the parent's bell
//! for results published quietly that their runner has not rung for
//! [`RING_LATE`]. The watcher sleeps until the earliest moment either could
//! be due, and until a runner wakes once the worker idled for
//! [`IDLE_AFTER`]; a runner tells it what it does with two plain stores
//! per command into a word of its own ([`Activity`]). The worker exits on
//! stop, at the end of its socket (the parent is gone), or with the parent
//! (a parent-death signal).
//!
//! For the fault-injection tests only (the cargo feature `fault-injection`),
//! an env's keyword arguments may carry a fault of the worker itself, which
//! no env could cause: see the `fault` module.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, Kwargs};
use exchange::{Area, Bells, Exchange, Schema, FIRST_COMMAND};
use pool_core::spin::{
    IDLE_AFTER, RING_EVERY, RING_LATE, RUNNER_SPIN, STALL, STOP_GRACE, STOP_POLL,
};
use pool_core::{lock, Op, Runner};
use tensordict::TensorDict;

use crate::fault::{take_fault, SocketFault};
use crate::spawn::WORKER_VAR;
use crate::wire::{op_code, op_of, write_frame, FrameReader, FromWorker, ToWorker};

/// The command word of `op` (with or without an input) in a slot.
pub(crate) fn command_word(op: Op, with_input: bool) -> u32 {
    FIRST_COMMAND + 2 * u32::from(op_code(op)) + u32::from(with_input)
}

/// The op and input flag of a command word from [`command_word`].
fn decode_command(word: u32) -> Option<(Op, bool)> {
    let code = word.checked_sub(FIRST_COMMAND)?;
    let op = op_of(u8::try_from(code / 2).ok()?)?;
    Some((op, code % 2 == 1))
}

/// Call at the top of `main`, after registering your own envs: in a worker
/// process started by the process backend this runs the worker and exits
/// the process (it never returns); anywhere else it returns at once.
///
/// ```
/// fn main() {
///     // envs::register("MyEnv", ...); // the envs workers may build
///     pool_proc::init();
///     // ... the program: build pools, step them ...
/// }
/// # main();
/// ```
pub fn init() {
    if let Some(var) = std::env::var_os(WORKER_VAR) {
        let code = run(&var.to_string_lossy());
        std::process::exit(code);
    }
}

/// Whether this process is a worker (started by the process backend).
pub fn is_worker() -> bool {
    std::env::var_os(WORKER_VAR).is_some()
}

/// The socket end a worker writes its messages to (shared by its env
/// threads; one frame per lock).
type Writer = Arc<Mutex<UnixStream>>;

fn send(writer: &Writer, msg: &FromWorker) -> io::Result<()> {
    let stream = lock(writer);
    write_frame(&stream, &msg.encode(), &[])
}

/// Runs the worker; returns the process's exit code.
fn run(var: &str) -> i32 {
    let Some(parent) = var
        .split_once(':')
        .and_then(|(_, pid)| pid.parse::<i32>().ok())
    else {
        eprintln!("rlpool worker: {WORKER_VAR}={var:?} is not `<worker>:<parent pid>`");
        return 2;
    };
    // Die with the parent; and if it is already gone, stop now.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid().map(|p| p.as_raw_pid()) != Some(parent) {
        return 3;
    }
    let socket = match io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
    {
        Ok(socket) => socket,
        Err(err) => {
            eprintln!("rlpool worker: no control socket on standard input: {err}");
            return 2;
        }
    };
    let writer: Writer = match socket.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(err) => {
            eprintln!("rlpool worker: cannot clone the control socket: {err}");
            return 2;
        }
    };
    let mut reader = FrameReader::new(socket);
    match serve(&mut reader, &writer) {
        Ok(()) => 0,
        Err(message) => {
            // Best effort: the parent may be gone.
            let _ = send(&writer, &FromWorker::Fatal { message });
            1
        }
    }
}

/// Reads the next message; `Ok(None)` at the end of the socket.
fn next_message(reader: &mut FrameReader) -> Result<Option<ToWorker>, String> {
    match reader.read() {
        Ok(Some(bytes)) => ToWorker::decode(&bytes)
            .map(Some)
            .map_err(|err| err.to_string()),
        Ok(None) => Ok(None),
        Err(err) => Err(format!("reading the control socket: {err}")),
    }
}

/// One env of this worker, with its buffers.
struct Hosted {
    env: usize,
    inner: Box<dyn Env>,
    runner: Runner,
    /// Whether the runner's buffers are views of the env's slot (shm):
    /// the env reads and writes them in place
    /// ([`Exchange::lend_area`]).
    lent: bool,
    /// Step commands received (for the socket fault).
    steps: u64,
    /// A socket fault in place of a step command (tests only).
    fault: Option<(SocketFault, u64)>,
}

impl Hosted {
    /// Counts a command; whether it is the one a socket fault replaces.
    fn faults_now(&mut self, op: Op) -> Option<SocketFault> {
        if op == Op::Reset {
            return None;
        }
        self.steps += 1;
        self.fault
            .filter(|&(_, at)| at == self.steps)
            .map(|(fault, _)| fault)
    }
}

/// Injects a socket fault (tests only).
fn inject(work: &Work, fault: SocketFault) {
    fault.inject(&lock(&work.writer));
}

/// How commands reach the runners.
enum Transport {
    /// From the socket (the main thread queues them): env (local index),
    /// op, encoded input.
    Queue {
        queue: Mutex<VecDeque<(usize, Op, Vec<u8>)>>,
        ready: Condvar,
    },
    /// From the slots' command words; the parent rings this worker's bell
    /// after posting.
    Shm {
        exchange: Box<Exchange>,
        bells: Bells,
        bell: usize,
    },
}

/// What the runner threads of a worker share.
struct Work {
    /// The envs, by local index (`env - first`), each run by one runner at
    /// a time.
    envs: Vec<Mutex<Hosted>>,
    /// The pool index of the first env.
    first: usize,
    writer: Writer,
    transport: Transport,
    stop: AtomicBool,
    /// What each runner does, by runner (the first ones, then spares; at
    /// most one runner per env), for the watcher.
    activity: Box<[Activity]>,
    /// Set by the watcher while it sleeps until a runner wakes (the worker
    /// was idle for [`IDLE_AFTER`]).
    watcher_asleep: AtomicBool,
    /// What the watcher sleeps on (with `wake_watcher`).
    watcher_lock: Mutex<()>,
    /// Wakes the watcher (a runner woke while it slept, or stop).
    wake_watcher: Condvar,
    /// The spare runners the watcher started.
    spares: Mutex<Vec<JoinHandle<()>>>,
    /// The origin of [`Work::now`], of [`exchange::now_ns`]'s clock.
    epoch_ns: u64,
}

impl Work {
    fn now(&self) -> u64 {
        exchange::now_ns().saturating_sub(self.epoch_ns)
    }

    /// Whether a command waits for a runner.
    fn pending(&self) -> bool {
        match &self.transport {
            Transport::Queue { queue, .. } => !lock(queue).is_empty(),
            Transport::Shm { exchange, .. } => (0..self.envs.len())
                .any(|local| exchange.pending_command(self.first + local).is_some()),
        }
    }

    /// A runner woke from its wait for commands: says so in its
    /// [`Activity`] (`start`: when its latest command started) and wakes
    /// the watcher if it sleeps until a runner wakes.
    fn runner_woke(&self, activity: &Activity, start: u64) {
        // SeqCst: pairs with the watcher's SeqCst store of
        // `watcher_asleep` and its SeqCst loads of the activities in
        // `doze` (Dekker): either this load sees the flag, or the watcher
        // sees this runner awake and does not sleep.
        activity
            .word
            .store(Activity::word(start, AWAKE), Ordering::SeqCst);
        // SeqCst: see the store above.
        if self.watcher_asleep.load(Ordering::SeqCst) {
            let _guard = lock(&self.watcher_lock);
            self.wake_watcher.notify_all();
        }
    }

    /// Wakes every runner (to stop, or to look for work).
    fn wake_all(&self) {
        match &self.transport {
            Transport::Queue { ready, queue } => {
                let _guard = lock(queue);
                ready.notify_all();
            }
            Transport::Shm { bells, bell, .. } => bells.ring(*bell),
        }
    }
}

/// [`Activity`]'s flag: the runner is not waiting for commands (it looks
/// for them, or runs one).
const AWAKE: u64 = 1;

/// [`Activity`]'s flag: the runner is inside a command (an env step, a
/// reset, the copies around them).
const BUSY: u64 = 2;

/// [`Activity`]'s flag: results the runner published quietly (shm) wait
/// for its ring of the parent's bell; the oldest was published at most
/// [`RING_EVERY`] before the start of its latest command.
const UNRUNG: u64 = 4;

/// The bits of an [`Activity`] word below the start time.
const FLAG_BITS: u32 = 3;

/// What one runner does, as the watcher sees it: one word, written by that
/// runner alone (by the watcher before it starts a spare), on cache lines
/// of its own, so that a runner's stores per command touch no line that
/// another runner writes. The word holds when the runner's latest command
/// started (ns since [`Work::now`]'s epoch, above [`FLAG_BITS`]) and the
/// flags [`AWAKE`], [`BUSY`] and [`UNRUNG`].
#[repr(align(128))]
struct Activity {
    word: AtomicU64,
}

impl Activity {
    /// The activity of a runner that was just started (awake, and its
    /// latest command counted as started at `start`).
    fn new(start: u64) -> Activity {
        Activity {
            word: AtomicU64::new(Activity::word(start, AWAKE)),
        }
    }

    /// The word of a runner whose latest command started at `start`, with
    /// `flags`.
    fn word(start: u64, flags: u64) -> u64 {
        start << FLAG_BITS | flags
    }

    /// When the latest command of the runner of `word` started.
    fn start(word: u64) -> u64 {
        word >> FLAG_BITS
    }

    /// The runner begins a command at `start`; `unrung`: results it
    /// published before wait for its ring.
    #[inline]
    fn begin(&self, start: u64, unrung: bool) {
        let unrung = if unrung { UNRUNG } else { 0 };
        // Release: pairs with the Acquire load in `watch`; the results this
        // runner published before (whose clocks were stored before this)
        // are visible to whoever the watcher's ring of the parent's bell
        // wakes.
        self.word.store(
            Activity::word(start, AWAKE | BUSY | unrung),
            Ordering::Release,
        );
    }

    /// The runner finished the command it began at `start`; `unrung`: the
    /// results it published quietly, this command's among them, wait for
    /// its ring.
    #[inline]
    fn end(&self, start: u64, unrung: bool) {
        let unrung = if unrung { UNRUNG } else { 0 };
        // Release: pairs with the Acquire load in `watch`, as in `begin`
        // (this command's result included).
        self.word
            .store(Activity::word(start, AWAKE | unrung), Ordering::Release);
    }

    /// The runner rang the parent's bell for every result it published
    /// (its latest command started at `start`).
    #[inline]
    fn rang(&self, start: u64) {
        // Relaxed: clears UNRUNG only; a watcher that still sees the flag
        // rings once more, which wakes a receiver for nothing.
        self.word
            .store(Activity::word(start, AWAKE), Ordering::Relaxed);
    }

    /// The runner is about to wait for commands (its latest command
    /// started at `start`; it rang for all its results).
    fn waiting(&self, start: u64) {
        // Relaxed: lets the watcher sleep; the runner's SeqCst store in
        // `Work::runner_woke`, after the wait, is what keeps the watcher
        // from sleeping through its next commands.
        self.word.store(Activity::word(start, 0), Ordering::Relaxed);
    }
}

/// Pins this thread (the worker's first, whose CPUs its threads inherit)
/// to `cpus`, and returns the CPUs it may run on then. A pin that is not
/// `required` (the pool's own spread) and cannot be had leaves the thread
/// where it was; a required one is an error message (the parent's error
/// names the worker, the message does not).
fn pin(worker: usize, cpus: &[usize], required: bool) -> Result<Vec<usize>, String> {
    let pinned = affinity::pin_current_thread(worker, cpus).and_then(|()| crate::current_cpus());
    let pinned = match pinned {
        Err(_) if !required => crate::current_cpus(),
        pinned => pinned,
    };
    pinned.map_err(|err| match err {
        crate::AffinityError::Pin { cpus, errno, .. } => {
            format!("could not pin to {cpus:?}: {errno}")
        }
        other => other.to_string(),
    })
}

fn serve(reader: &mut FrameReader, writer: &Writer) -> Result<(), String> {
    let io_err = |e: io::Error| format!("writing the control socket: {e}");
    let Some(ToWorker::Hello {
        worker,
        runners,
        max_runners,
        affinity,
        pin_required,
        envs,
    }) = next_message(reader)?
    else {
        return Err("the first message was not a hello".into());
    };
    if let Some(cpus) = affinity {
        let cpus: Vec<usize> = cpus.into_iter().map(|c| c as usize).collect();
        match pin(worker as usize, &cpus, pin_required) {
            Ok(now) => send(
                writer,
                &FromWorker::Pinned {
                    cpus: now.into_iter().map(|c| c as u32).collect(),
                },
            )
            .map_err(io_err)?,
            Err(message) => {
                send(writer, &FromWorker::PinFailed { message }).map_err(io_err)?;
                return Ok(());
            }
        }
    }
    let first = envs.first().map_or(0, |e| e.env as usize);
    let mut hosted = Vec::with_capacity(envs.len());
    for (local, entry) in envs.into_iter().enumerate() {
        let env = entry.env as usize;
        if env != first + local {
            return Err(format!(
                "env {env} is not next after env {}",
                first + local - 1
            ));
        }
        let mut fault = None;
        let built = Kwargs::from_bytes(&entry.kwargs)
            .map_err(|e| e.to_string())
            .and_then(take_fault)
            .map_err(|message| (message, false));
        let built = built.and_then(|(kwargs, socket_fault)| {
            fault = socket_fault;
            match catch_unwind(AssertUnwindSafe(|| envs::make(&entry.name, &kwargs))) {
                Ok(Ok(inner)) => Ok(inner),
                Ok(Err(err)) => Err((err.to_string(), false)),
                Err(payload) => Err((pool_core::panic_message(&*payload), true)),
            }
        });
        match built {
            Ok(inner) => {
                let runner = Runner::new(&*inner);
                send(
                    writer,
                    &FromWorker::Built {
                        env: entry.env,
                        name: inner.name().to_owned(),
                        specs: inner.specs().to_bytes(),
                        input: tensordict::encode(&runner.input),
                        next: tensordict::encode(&runner.next),
                        root: tensordict::encode(&runner.root),
                    },
                )
                .map_err(io_err)?;
                hosted.push(Mutex::new(Hosted {
                    env,
                    inner,
                    runner,
                    lent: false,
                    steps: 0,
                    fault,
                }));
            }
            Err((message, panicked)) => {
                send(
                    writer,
                    &FromWorker::BuildFailed {
                        env: entry.env,
                        message,
                        panicked,
                    },
                )
                .map_err(io_err)?;
                return Ok(());
            }
        }
    }
    let transport = match next_message(reader)? {
        None => return Ok(()),
        Some(ToWorker::UseQueue) => Transport::Queue {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        },
        Some(ToWorker::UseShm {
            input,
            result,
            next,
        }) => {
            let schema = |bytes: &[u8], what: &str| {
                Schema::decode(bytes).map_err(|e| format!("the {what} schema: {e}"))
            };
            let fd = reader
                .take_fd()
                .ok_or("the shm exchange came without its descriptor")?;
            let bells_fd = reader
                .take_fd()
                .ok_or("the shm exchange came without the doorbells' descriptor")?;
            let exchange = Exchange::open(
                fd,
                schema(&input, "input")?,
                schema(&result, "result")?,
                schema(&next, "next")?,
            )
            .map_err(|e| format!("opening the exchange: {e}"))?;
            let bell = worker as usize;
            let bells = Bells::open(bells_fd).map_err(|e| format!("opening the doorbells: {e}"))?;
            if bell >= bells.len() {
                return Err(format!("no doorbell {bell} among {}", bells.len()));
            }
            for h in &mut hosted {
                lend(
                    &exchange,
                    h.get_mut().unwrap_or_else(PoisonError::into_inner),
                );
            }
            Transport::Shm {
                exchange: Box::new(exchange),
                bells,
                bell,
            }
        }
        Some(other) => return Err(format!("expected the exchange, got {other:?}")),
    };
    let hosted_len = hosted.len();
    let runners = (runners as usize).clamp(1, hosted_len.max(1));
    // Runners and spares: one per env, or fewer if the parent says so.
    let most = match max_runners as usize {
        0 => hosted_len.max(1),
        most => most.clamp(runners, hosted_len.max(1)),
    };
    let work = Arc::new(Work {
        envs: hosted,
        first,
        writer: Arc::clone(writer),
        transport,
        stop: AtomicBool::new(false),
        // At most one runner per env (and one runner without envs), or
        // the parent's cap.
        activity: (0..most).map(|_| Activity::new(0)).collect(),
        watcher_asleep: AtomicBool::new(false),
        watcher_lock: Mutex::new(()),
        wake_watcher: Condvar::new(),
        spares: Mutex::new(Vec::new()),
        epoch_ns: exchange::now_ns(),
    });
    let mut threads = Vec::with_capacity(runners + 1);
    for index in 0..runners {
        threads.push(spawn_runner(&work, index)?);
    }
    let for_watcher = Arc::clone(&work);
    threads.push(
        std::thread::Builder::new()
            .name("rlpool-watcher".into())
            .spawn(move || watch(&for_watcher, runners))
            .map_err(|e| format!("starting the watcher thread: {e}"))?,
    );
    send(writer, &FromWorker::Started).map_err(io_err)?;
    let outcome = loop {
        // No deadline: the parent writes, or closes the socket (or dies,
        // and the parent-death signal ends this process).
        let message = match reader.read() {
            Ok(Some(bytes)) => ToWorker::decode(&bytes).map_err(|err| err.to_string()),
            Ok(None) => break Ok(()),
            Err(err) => break Err(format!("reading the control socket: {err}")),
        };
        match message {
            Ok(ToWorker::Stop) => break Ok(()),
            Ok(ToWorker::Command { env, op, input }) => match &work.transport {
                Transport::Queue { queue, ready } => {
                    let local = (env as usize).wrapping_sub(work.first);
                    if local >= work.envs.len() {
                        break Err(format!("a command for env {env}, not hosted here"));
                    }
                    lock(queue).push_back((local, op, input));
                    ready.notify_one();
                }
                Transport::Shm { .. } => {
                    break Err("a command over the socket with the shm exchange".into())
                }
            },
            Ok(other) => break Err(format!("unexpected message {other:?}")),
            Err(err) => break Err(err),
        }
    };
    work.stop.store(true, Ordering::SeqCst);
    work.wake_all();
    {
        let _guard = lock(&work.watcher_lock);
        work.wake_watcher.notify_all();
    }
    let deadline = Instant::now() + STOP_GRACE;
    // The watcher is among `threads`: once it is finished, it starts no
    // more spares.
    while let Some(thread) = threads.pop() {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
    for thread in std::mem::take(&mut *lock(&work.spares)) {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
    outcome
}

/// The watcher: starts a spare runner when every runner is inside an env,
/// none started one for [`STALL`], and commands wait (at most one runner
/// per env), and rings the parent's bell for results published quietly
/// that wait for their runner's ring since [`RING_LATE`] after the start
/// of its latest command. It looks at the runners' [`Activity`] only when
/// one of these could be due: at the earliest deadline of what it saw, and
/// at the latest `min(STALL, RING_LATE)` after it looked (a command
/// started after that look is not due before); a runner's commands wake
/// it never. Once every runner has waited for commands for
/// [`IDLE_AFTER`], it sleeps until a runner wakes. Returns at stop.
///
/// `runners`: how many runners the worker started (the watcher starts the
/// spares, so it counts them).
fn watch(work: &Arc<Work>, mut runners: usize) {
    let nanos = |d: Duration| d.as_nanos() as u64;
    let shm = match &work.transport {
        Transport::Shm { exchange, .. } => Some(&**exchange),
        Transport::Queue { .. } => None,
    };
    // The earliest a command the watcher has not seen could be due: it
    // starts after the look, so it is due STALL (and, shm, RING_LATE) after.
    let horizon = nanos(if shm.is_some() {
        STALL.min(RING_LATE)
    } else {
        STALL
    });
    // By runner: the word the watcher last rang for (a word, not only its
    // start: two commands may start at the same tick of a coarse clock).
    let mut rung_for = vec![u64::MAX; work.activity.len()];
    let mut told_no_spare = false;
    // The runners' activity words of one look (allocated once).
    let mut words = Vec::with_capacity(work.activity.len());
    loop {
        words.clear();
        words.extend(work.activity[..runners].iter().map(|activity| {
            // Acquire: pairs with the Release stores in `Activity::begin`
            // and `Activity::end`: the results published before them are
            // visible to whoever the ring below wakes.
            activity.word.load(Ordering::Acquire)
        }));
        // Read after the words: no start in them is later.
        let now = work.now();
        let mut all_busy = true;
        let mut all_waiting = true;
        let mut latest_start = 0;
        let mut due = now + horizon;
        let mut ring_now = false;
        for (index, &word) in words.iter().enumerate() {
            let start = Activity::start(word);
            all_busy &= word & BUSY != 0;
            all_waiting &= word & AWAKE == 0;
            latest_start = latest_start.max(start);
            if word & UNRUNG != 0 && rung_for[index] != word {
                let ring_due = start + nanos(RING_LATE);
                if now >= ring_due {
                    ring_now = true;
                    rung_for[index] = word;
                } else {
                    due = due.min(ring_due);
                }
            }
        }
        if let (true, Some(exchange)) = (ring_now, shm) {
            exchange.ring();
        }
        if all_busy && runners < work.activity.len() {
            let stall_due = latest_start + nanos(STALL);
            if now < stall_due {
                due = due.min(stall_due);
            } else if work.pending() {
                match spawn_runner(work, runners) {
                    Ok(handle) => {
                        lock(&work.spares).push(handle);
                        runners += 1;
                    }
                    // No thread to spare: the commands wait for a runner
                    // (the watcher tries again at its next look).
                    Err(message) => {
                        if !std::mem::replace(&mut told_no_spare, true) {
                            eprintln!("rlpool worker: {message}");
                        }
                    }
                }
            }
        }
        let guard = lock(&work.watcher_lock);
        // Relaxed: under `watcher_lock`, which the stopping main thread
        // takes after its store of `stop` to notify `wake_watcher`.
        if work.stop.load(Ordering::Relaxed) {
            return;
        }
        if all_waiting && now.saturating_sub(latest_start) >= nanos(IDLE_AFTER) {
            doze(work, guard, runners);
        } else {
            let sleep = Duration::from_nanos(due.saturating_sub(work.now()));
            // Woken early only by stop.
            let _ = work.wake_watcher.wait_timeout(guard, sleep);
        }
    }
}

/// The watcher sleeps (holding `guard` of `work.watcher_lock`) until a
/// runner wakes from its wait for commands, or stop; [`STOP_POLL`] bounds
/// the sleep should a wake-up be lost.
fn doze(work: &Work, guard: std::sync::MutexGuard<'_, ()>, runners: usize) {
    // SeqCst: pairs with the SeqCst store and load in `Work::runner_woke`
    // (see there).
    work.watcher_asleep.store(true, Ordering::SeqCst);
    let all_waiting = work.activity[..runners]
        .iter()
        // SeqCst: see the store of `watcher_asleep` above.
        .all(|activity| activity.word.load(Ordering::SeqCst) & AWAKE == 0);
    let guard = if all_waiting {
        work.wake_watcher
            .wait_timeout(guard, STOP_POLL)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    } else {
        guard
    };
    // Relaxed: a runner that still sees the flag only wakes the watcher
    // for nothing; the store is made under `watcher_lock`.
    work.watcher_asleep.store(false, Ordering::Relaxed);
    drop(guard);
}

/// Starts runner `index` (below `work.activity.len()`).
fn spawn_runner(work: &Arc<Work>, index: usize) -> Result<JoinHandle<()>, String> {
    // Relaxed: the thread's start orders it before the runner's own
    // stores; the watcher that reads it is this thread, or starts later.
    // Awake, and counted as having started a command now: not idle, and
    // not stalled before STALL after it takes its first command.
    work.activity[index]
        .word
        .store(Activity::word(work.now(), AWAKE), Ordering::Relaxed);
    let for_runner = Arc::clone(work);
    std::thread::Builder::new()
        .name(format!("rlpool-runner-{index}"))
        .spawn(move || run_commands(&for_runner, index))
        .map_err(|e| format!("starting runner thread {index}: {e}"))
}

/// A runner (`index` in `work.activity`): takes commands (from the queue,
/// or from the slots after a ring of the worker's bell) and runs them,
/// until stop. Per command it reads the clock once and stores its
/// [`Activity`] twice.
fn run_commands(work: &Work, index: usize) {
    let activity = &work.activity[index];
    // When this runner's latest command started.
    // Relaxed: written by this thread, or by the watcher before it started
    // this thread.
    let mut start = Activity::start(activity.word.load(Ordering::Relaxed));
    loop {
        // Relaxed: a hint; the waits below end at stop (a ring or a
        // notification after the store of `stop`) or after STOP_POLL.
        if work.stop.load(Ordering::Relaxed) {
            return;
        }
        match &work.transport {
            Transport::Queue { queue, ready } => {
                let mut waited = false;
                let next = {
                    let mut q = lock(queue);
                    // Relaxed: under the queue's lock, which the stopping
                    // main thread takes after its store to notify `ready`.
                    if q.is_empty() && !work.stop.load(Ordering::Relaxed) {
                        activity.waiting(start);
                        waited = true;
                        q = ready
                            .wait_timeout(q, STOP_POLL)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                    q.pop_front()
                };
                if waited {
                    work.runner_woke(activity, start);
                }
                if let Some((local, op, input)) = next {
                    start = work.now();
                    activity.begin(start, false);
                    queue_command(work, local, op, &input);
                    activity.end(start, false);
                }
            }
            Transport::Shm {
                exchange,
                bells,
                bell,
            } => {
                // The ticket first: a ring after it ends the wait below.
                let ticket = bells.listen(*bell);
                let mut ran = false;
                // Results are published quietly and the parent's bell rung
                // once per scan (or before a command once the oldest unrung
                // result is RING_EVERY old), so a sleeping parent wakes
                // once per batch, not once per env; while this runner is
                // inside a long step, the watcher rings for the results
                // before it. When the command after which results first
                // waited for a ring started.
                let mut unrung_since: Option<u64> = None;
                // When the last command of the scan published (one clock
                // read per command: it is the next command's start).
                let mut published: Option<u64> = None;
                for local in 0..work.envs.len() {
                    let slot = work.first + local;
                    if let Ok(Some(word)) = exchange.try_take_command(slot) {
                        ran = true;
                        start = published.take().unwrap_or_else(|| work.now());
                        if unrung_since.is_some_and(|since| {
                            start.saturating_sub(since) >= RING_EVERY.as_nanos() as u64
                        }) {
                            exchange.ring();
                            unrung_since = None;
                        }
                        activity.begin(start, unrung_since.is_some());
                        let go_on = shm_command(work, exchange, local, word, &mut published);
                        activity.end(start, true);
                        if !go_on {
                            exchange.ring();
                            return;
                        }
                        unrung_since.get_or_insert(start);
                    }
                }
                if unrung_since.is_some() {
                    exchange.ring();
                    activity.rang(start);
                }
                if !ran {
                    activity.waiting(start);
                    bells.wait(*bell, ticket, Some(Instant::now() + STOP_POLL), RUNNER_SPIN);
                    work.runner_woke(activity, start);
                }
            }
        }
    }
}

/// Runs `op` on a hosted env, catching a panic; the failure as a message.
fn run_op(h: &mut Hosted, op: Op, with_input: bool) -> Result<(), FromWorker> {
    let Hosted { inner, runner, .. } = h;
    match catch_unwind(AssertUnwindSafe(|| {
        runner.run(&mut **inner, op, with_input)
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(FromWorker::Failed {
            env: h.env as u32,
            during: err.during.into(),
            message: err.source.to_string(),
            panicked: false,
        }),
        Err(payload) => Err(FromWorker::Failed {
            env: h.env as u32,
            during: h.runner.during.into(),
            message: pool_core::panic_message(&*payload),
            panicked: true,
        }),
    }
}

/// A command of the queue exchange: the input decoded into the env's
/// buffer, the op run, the result (or failure) sent over the socket.
fn queue_command(work: &Work, local: usize, op: Op, input: &[u8]) {
    let mut h = lock(&work.envs[local]);
    if let Some(fault) = h.faults_now(op) {
        return inject(work, fault);
    }
    let with_input = !input.is_empty();
    let filled = if with_input {
        tensordict::decode(input)
            .map_err(|e| e.to_string())
            .and_then(|td| h.runner.input.fill_from(&td).map_err(|e| e.to_string()))
    } else {
        Ok(())
    };
    let msg = match filled {
        Err(message) => FromWorker::Failed {
            env: h.env as u32,
            during: op.name().into(),
            message: format!("invalid input: {message}"),
            panicked: false,
        },
        Ok(()) => match run_op(&mut h, op, with_input) {
            Ok(()) => FromWorker::Result {
                env: h.env as u32,
                next: if op == Op::Reset {
                    Vec::new()
                } else {
                    tensordict::encode(&h.runner.next)
                },
                root: if op == Op::Step {
                    Vec::new()
                } else {
                    tensordict::encode(&h.runner.root)
                },
            },
            Err(failed) => failed,
        },
    };
    // A parent that is gone: the main thread sees the end of the socket.
    let _ = send(&work.writer, &msg);
}

/// A command of the shm exchange: the input read from the env's slot, the
/// op run, the result published in the slot (a failure goes over the
/// socket). Returns false if the worker must stop.
fn shm_command(
    work: &Work,
    exchange: &Exchange,
    local: usize,
    word: u32,
    published: &mut Option<u64>,
) -> bool {
    let mut guard = lock(&work.envs[local]);
    let h = &mut *guard;
    let slot = h.env;
    let Some((op, with_input)) = decode_command(word) else {
        let _ = send(
            &work.writer,
            &FromWorker::Fatal {
                message: format!("env {}: unknown command word {word}", h.env),
            },
        );
        return false;
    };
    if let Some(fault) = h.faults_now(op) {
        inject(work, fault);
        return true;
    }
    // A lent slot's clock goes odd before the env touches its views.
    let lent = h.lent.then(|| exchange.begin_lent(slot));
    let mut outcome = if lent.is_none() && (with_input || op != Op::Reset) {
        exchange
            .read_input(slot, &mut h.runner.input)
            .map_err(|e| FromWorker::Failed {
                env: h.env as u32,
                during: op.name().into(),
                message: format!("invalid input: {e}"),
                panicked: false,
            })
    } else {
        Ok(())
    };
    if outcome.is_ok() {
        outcome = run_op(h, op, with_input);
    }
    // The publish time, read once: also the next command's start.
    let now = exchange::now_ns();
    *published = Some(now.saturating_sub(work.epoch_ns));
    let published = match outcome {
        Ok(()) if lent.is_some() => {
            let write = lent.expect("just checked");
            let runner = &h.runner;
            let (result, next) = match op {
                Op::Reset => (None, Some(&runner.root)),
                Op::Step => (Some(&runner.next), None),
                Op::StepAndMaybeReset => (Some(&runner.next), Some(&runner.root)),
            };
            exchange
                .publish_lent_at(write, result, next, now)
                .map_err(|e| unfit(h.env, op, e))
        }
        // A failed command of a lent slot leaves its clock odd: the slot
        // reads busy until the next command's write.
        Ok(()) => match op {
            Op::Reset => {
                let empty = TensorDict::new(h.runner.next.batch_size());
                exchange.publish_quiet_at(slot, &empty, Some(&h.runner.root), now)
            }
            Op::Step => exchange.publish_quiet_at(slot, &h.runner.next, None, now),
            Op::StepAndMaybeReset => {
                exchange.publish_quiet_at(slot, &h.runner.next, Some(&h.runner.root), now)
            }
        }
        .map_err(|e| unfit(h.env, op, e)),
        Err(failed) => Err(failed),
    };
    if let Err(failed) = published {
        if send(&work.writer, &failed).is_err() {
            return false;
        }
    }
    true
}

/// The failure of a result that does not fit its slot.
fn unfit(env: usize, op: Op, e: exchange::WriteError) -> FromWorker {
    FromWorker::Failed {
        env: env as u32,
        during: op.name().into(),
        message: format!("its result does not fit the slot: {e}"),
        panicked: false,
    }
}

/// Lends an env's slot to its runner's buffers, when each of them fits its
/// area (the parent made the schemas from these buffers, so they do): the
/// env then reads its action and writes its result in place.
#[allow(unsafe_code)]
fn lend(exchange: &Exchange, h: &mut Hosted) {
    let runner = &mut h.runner;
    // SAFETY: this worker is the only one of the slot, and lends it once
    // (here, before any command); the runner touches the buffers only
    // inside `shm_command`, between `begin_lent` and the publish; the
    // parent writes a slot's input only while no command of it is pending
    // or running (`Exchange::write_input`'s contract).
    let lent = unsafe {
        (
            exchange.lend_area(h.env, Area::Input, &runner.input),
            exchange.lend_area(h.env, Area::Result, &runner.next),
            exchange.lend_area(h.env, Area::Next, &runner.root),
        )
    };
    if let (Some(input), Some(next), Some(root)) = lent {
        runner.input = input;
        runner.next = next;
        runner.root = root;
        h.lent = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pin the pool chose that cannot be had leaves the thread where it
    /// was; a required one is an error naming the CPUs. (A CPU past any
    /// this machine has cannot be pinned to; the thread stays unpinned.)
    #[test]
    fn a_best_effort_pin_that_fails_runs_where_it_was() {
        std::thread::spawn(|| {
            let before = crate::current_cpus().unwrap();
            let nowhere = [1000];
            assert_eq!(pin(0, &nowhere, false).unwrap(), before);
            let err = pin(0, &nowhere, true).unwrap_err();
            assert!(err.contains("1000"), "{err}");
            assert_eq!(crate::current_cpus().unwrap(), before);
        })
        .join()
        .unwrap();
    }

    /// An activity word keeps its start beside the flags, and each
    /// runner's word has cache lines of its own.
    #[test]
    fn activity_words_keep_the_start_and_the_flags_apart() {
        let start = Duration::from_secs(3600 * 24 * 365).as_nanos() as u64;
        for flags in [
            0,
            AWAKE,
            AWAKE | BUSY,
            AWAKE | UNRUNG,
            AWAKE | BUSY | UNRUNG,
        ] {
            let word = Activity::word(start, flags);
            assert_eq!(Activity::start(word), start);
            assert_eq!(word & (AWAKE | BUSY | UNRUNG), flags);
        }
        let activity = Activity::new(7);
        activity.begin(8, true);
        assert_eq!(
            activity.word.load(Ordering::Relaxed),
            Activity::word(8, AWAKE | BUSY | UNRUNG)
        );
        activity.end(8, true);
        assert_eq!(
            activity.word.load(Ordering::Relaxed),
            Activity::word(8, AWAKE | UNRUNG)
        );
        activity.rang(8);
        assert_eq!(
            activity.word.load(Ordering::Relaxed),
            Activity::word(8, AWAKE)
        );
        activity.waiting(8);
        assert_eq!(activity.word.load(Ordering::Relaxed), Activity::word(8, 0));
        assert!(std::mem::align_of::<Activity>() >= 128);
    }

    #[test]
    fn command_words_round_trip_and_stay_below_stop() {
        for op in [Op::Reset, Op::Step, Op::StepAndMaybeReset] {
            for with_input in [false, true] {
                let word = command_word(op, with_input);
                assert_eq!(decode_command(word), Some((op, with_input)));
            }
        }
        assert_eq!(decode_command(FIRST_COMMAND - 1), None);
        assert_eq!(
            decode_command(command_word(Op::StepAndMaybeReset, true) + 1),
            None
        );
    }
}
