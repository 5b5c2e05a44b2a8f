//! `cargo xtask instructions`: issue 17's instruction counts, the
//! calling thread's and the workers' instructions per env-step, counted by
//! callgrind (which counts instructions, not seconds: the figures do not
//! depend on the machine's load).
//!
//! For each mode of `pool/examples/profile_pool.rs` (`raw`, `sync`,
//! `sync_samr`, ...) it runs the example twice under `valgrind
//! --tool=callgrind --separate-threads=yes`, at [`SHORT`] and [`LONG`]
//! iterations, and divides the difference of each thread's total by the
//! env-steps in between, so that building and dropping the pool cancel
//! out. Thread 1 is the calling thread; every other thread is a worker.
//! Under valgrind an env step takes about 50 times longer, so a worker
//! publishes each result alone: the workers' figure overstates what the
//! copies into the batch rows cost natively. With `--native-runs` the
//! example is built (in `target/instructions-native/build`, apart from
//! the usual build) with `RLPOOL_PUBLISH_RUN_US=1000`, so that under
//! callgrind a worker's runs of results are as long as native ones (up to
//! 16 CartPoles): the figure to hold against the goal.
//!
//! With `--procs` the process backend is counted: its workers are other
//! processes (the example re-executed), which `--trace-children=yes`
//! follows (rustix goes through libc for that, see the workspace
//! manifest); the calling thread is thread 1 of the first process, every
//! other thread of every process a worker's.
//!
//! The calling thread also runs queued envs while it waits
//! (`ThreadBackend::help`): its instructions outside of that
//! (`callgrind_annotate --inclusive=yes` of its file gives what `help`
//! took) are its bookkeeping, the figure of issue 17's goal for the
//! calling thread.
//!
//! The output files stay under `target/instructions/` for
//! `callgrind_annotate`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, root, step};

/// The iterations of the shorter run.
const SHORT: usize = 200;
/// The iterations of the longer run.
const LONG: usize = 1200;

/// Issue 17's goals: the calling thread's instructions per env-step in a
/// synchronous step, and the whole pool's over the raw loop's.
const CALLER_GOAL: f64 = 150.0;
const WHOLE_GOAL: f64 = 1.3;

/// What one run of the example counted: per process and thread
/// (callgrind's numbering), its instructions. Thread 1 of the first
/// process (the lowest pid: the others are its children) is the calling
/// thread.
type Counts = BTreeMap<(u32, u32), u64>;

/// Runs the counts; `args` are what followed `instructions`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut modes = vec!["raw".to_string(), "sync".into(), "sync_samr".into()];
    let mut envs = 64usize;
    let mut env = "CartPole-v1".to_string();
    let mut native_runs = false;
    let mut procs = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| format!("instructions: {name} needs a value"))
        };
        match arg.as_str() {
            "--modes" => modes = value("--modes")?.split(',').map(str::to_owned).collect(),
            "--envs" => {
                let text = value("--envs")?;
                envs = text
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("instructions: --envs {text} is not a count"))?;
            }
            "--env" => env = value("--env")?,
            "--native-runs" => native_runs = true,
            "--procs" => procs = true,
            other => {
                return Err(format!(
                    "instructions: unknown argument `{other}` (takes --modes m,m,... \
                     --envs N --env NAME --native-runs --procs)"
                ))
            }
        }
    }
    let status = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if !status.is_ok_and(|s| s.success()) {
        return Err("instructions: needs valgrind (Debian's valgrind package)".into());
    }
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "pool",
        "--example",
        "profile_pool",
    ]);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let (build_dir, out) = if native_runs {
        // Its own target directory: the usual build keeps its artifacts.
        let dir = target.join("instructions-native");
        build
            .env("CARGO_TARGET_DIR", dir.join("build"))
            .env("RLPOOL_PUBLISH_RUN_US", "1000");
        (dir.join("build"), dir)
    } else {
        (target.clone(), target.join("instructions"))
    };
    step("cargo build --release (profile_pool)", build)?;
    let binary = build_dir
        .join("release")
        .join("examples")
        .join("profile_pool");

    let mut rows = Vec::new();
    for mode in &modes {
        let dir = out.join(mode);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
        let mut counts = Vec::new();
        let mut helped = Vec::new();
        // The raw loop has no pool, so no backend.
        let backend_procs = procs && mode != "raw";
        for iters in [SHORT, LONG] {
            let mut valgrind = Command::new("valgrind");
            valgrind
                .current_dir(&dir)
                .args(["--tool=callgrind", "--separate-threads=yes"])
                .args(backend_procs.then_some("--trace-children=yes"))
                .arg(format!(
                    "--callgrind-out-file={}/cg.{iters}.%p",
                    dir.display()
                ))
                .arg(&binary)
                .args([mode.as_str(), &envs.to_string(), &iters.to_string(), &env]);
            if backend_procs {
                valgrind.arg("procs");
            }
            valgrind.stdout(Stdio::null()).stderr(Stdio::null());
            let backend = if backend_procs { " procs" } else { "" };
            step(
                &format!("callgrind: profile_pool {mode} {envs} {iters} {env}{backend}"),
                valgrind,
            )?;
            counts.push(read_counts(&dir, iters)?);
            helped.push(caller_helping(&dir, iters)?);
        }
        // An iteration of the async modes receives and sends half the envs.
        let per_iteration = if mode.starts_with("async") {
            envs / 2
        } else {
            envs
        };
        let steps = ((LONG - SHORT) * per_iteration) as f64;
        let (caller, workers) = per_env_step(&counts[0], &counts[1], steps);
        let helping = (helped[1] as f64 - helped[0] as f64) / steps;
        rows.push((mode.clone(), caller, caller - helping, workers));
    }

    let raw = rows
        .iter()
        .find(|(mode, ..)| mode == "raw")
        .map(|&(_, caller, _, workers)| caller + workers);
    println!();
    println!(
        "instructions per env-step, {env} x {envs}, {} (callgrind, {LONG} - {SHORT} \
         iterations{}; files in {})",
        if procs { "processes" } else { "threads" },
        if native_runs {
            ", runs of results as long as native ones"
        } else {
            ""
        },
        out.display()
    );
    println!("| mode | calling thread | of it not helping | workers | whole | whole / raw loop |");
    println!("|---|---|---|---|---|---|");
    for (mode, caller, own, workers) in &rows {
        let whole = caller + workers;
        let over = raw.map_or("".to_string(), |raw| format!("{:.2}x", whole / raw));
        println!("| {mode} | {caller:.0} | {own:.0} | {workers:.0} | {whole:.0} | {over} |");
    }
    if let (Some((_, caller, own, workers)), Some(raw)) =
        (rows.iter().find(|(mode, ..)| mode == "sync"), raw)
    {
        println!(
            "issue 17's goals (sync): calling thread {own:.0} not helping (at most \
             {CALLER_GOAL:.0}), whole pool {:.2}x the raw loop (at most {WHOLE_GOAL}x)",
            (caller + workers) / raw
        );
    }
    Ok(())
}

/// A callgrind output file, its process and thread, and its total.
type RunFile = (PathBuf, (u32, u32), u64);

/// Every callgrind output file of the run of `iters` iterations in `dir`
/// (one per thread of each process) with its process, thread and total
/// ([`parse_counts`]); files without a total are left out.
fn run_files(dir: &Path, iters: usize) -> Result<Vec<RunFile>, String> {
    let prefix = format!("cg.{iters}.");
    let mut files = Vec::new();
    let entries = fs::read_dir(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let text = fs::read_to_string(entry.path())
            .map_err(|err| format!("{}: {err}", entry.path().display()))?;
        if let Some((pid_thread, total)) = parse_counts(&text) {
            files.push((entry.path(), pid_thread, total));
        }
    }
    Ok(files)
}

/// The counts of the run of `iters` iterations: every callgrind output file
/// of it in `dir` (one per thread of each process).
fn read_counts(dir: &Path, iters: usize) -> Result<Counts, String> {
    let mut counts = Counts::new();
    for (_, pid_thread, total) in run_files(dir, iters)? {
        *counts.entry(pid_thread).or_default() += total;
    }
    if counts.is_empty() {
        return Err(format!(
            "instructions: no callgrind output for {iters} iterations in {}",
            dir.display()
        ));
    }
    Ok(counts)
}

/// The instructions that the calling thread (thread 1 of the first
/// process) spent helping, in the run of `iters` iterations in `dir`: the
/// inclusive cost of `ThreadBackend::help` in its file, as
/// `callgrind_annotate` gives it; 0 for a thread that never helped.
fn caller_helping(dir: &Path, iters: usize) -> Result<u64, String> {
    let caller = run_files(dir, iters)?
        .into_iter()
        .filter(|(_, (_, thread), _)| *thread == 1)
        .min_by_key(|(_, (pid, _), _)| *pid);
    let Some((file, ..)) = caller else {
        return Ok(0);
    };
    // Run in the files' directory on the bare name: given a path elsewhere,
    // callgrind_annotate merged the other threads' files in.
    let name = file.file_name().unwrap_or_default();
    let out = Command::new("callgrind_annotate")
        .current_dir(dir)
        .args(["--inclusive=yes", "--auto=no", "--threshold=100"])
        .arg(name)
        .output()
        .map_err(|err| format!("callgrind_annotate {}: {err}", file.display()))?;
    if !out.status.success() {
        return Err(format!("callgrind_annotate {} failed", file.display()));
    }
    Ok(help_inclusive(&String::from_utf8_lossy(&out.stdout)))
}

/// The sum of the inclusive counts of `ThreadBackend::help` in
/// `callgrind_annotate --inclusive=yes` output: one line per source file
/// its code came from (code inlined into it counts under its own file), so
/// the lines add up, none inside another.
fn help_inclusive(annotated: &str) -> u64 {
    annotated
        .lines()
        .filter_map(|line| {
            let (count, rest) = line.trim_start().split_once(' ')?;
            let function = rest.split(" [").next()?;
            function
                .ends_with("ThreadBackend>::help")
                .then(|| count.replace(',', "").parse::<u64>().ok())?
        })
        .sum()
}

/// The process, thread number and total instructions of one callgrind
/// output file; `None` for a file without a total (callgrind writes an
/// empty one for the process itself when threads are separated). A file
/// without a thread line is thread 1, without a pid line process 0.
fn parse_counts(text: &str) -> Option<((u32, u32), u64)> {
    let (mut pid, mut thread) = (0, 1);
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("pid: ") {
            pid = n.trim().parse().ok()?;
        }
        if let Some(n) = line.strip_prefix("thread: ") {
            thread = n.trim().parse().ok()?;
        }
        if let Some(total) = line
            .strip_prefix("summary: ")
            .or_else(|| line.strip_prefix("totals: "))
        {
            let total = total.split_whitespace().next()?.parse().ok()?;
            return Some(((pid, thread), total));
        }
    }
    None
}

/// The calling thread's and the workers' instructions per env-step between
/// two runs (`steps` env-steps apart).
fn per_env_step(short: &Counts, long: &Counts, steps: f64) -> (f64, f64) {
    // The first process's thread 1 (keys sort by pid, then thread).
    let is_caller = |c: &Counts, key: &(u32, u32)| {
        key.1 == 1 && c.keys().next().is_some_and(|first| first.0 == key.0)
    };
    let caller = |c: &Counts| {
        c.iter()
            .filter(|(key, _)| is_caller(c, key))
            .map(|(_, &n)| n as f64)
            .sum::<f64>()
    };
    let workers = |c: &Counts| {
        c.iter()
            .filter(|(key, _)| !is_caller(c, key))
            .map(|(_, &n)| n as f64)
            .sum::<f64>()
    };
    (
        (caller(long) - caller(short)) / steps,
        (workers(long) - workers(short)) / steps,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's file gives its number and total; the process's empty
    /// file gives nothing.
    #[test]
    fn counts_come_from_the_thread_and_summary_lines() {
        let file = "# callgrind format\nversion: 1\npid: 8513\npart: 1\nthread: 3\n\n\
                    events: Ir\nsummary: 3277418\ntotals: 3277418\n";
        assert_eq!(parse_counts(file), Some(((8513, 3), 3_277_418)));
        assert_eq!(
            parse_counts("version: 1\nsummary: 12\n"),
            Some(((0, 1), 12))
        );
        assert_eq!(parse_counts("# callgrind format\nversion: 1\n"), None);
    }

    /// `help`'s inclusive lines add up, whatever file each came from;
    /// functions called from it and other functions are not counted.
    #[test]
    fn helping_is_the_sum_of_the_help_lines() {
        let annotated = "\
            --------\n\
            2,000 (100.0%)  PROGRAM TOTALS\n\
            1,500 (75.0%)  pool/src/pool.rs:pool::pool::AsyncEnvPool::recv_batch [/bin/p]\n\
            1,200 (60.0%)  backend/help.rs:pool_thread::backend::help::<impl pool_thread::backend::ThreadBackend>::help [/bin/p]\n\
              300 (15.0%)  backend/worker.rs:pool_thread::backend::help::<impl pool_thread::backend::ThreadBackend>::help [/bin/p]\n\
              900 (45.0%)  backend/cell.rs:pool_thread::backend::cell::run_cell [/bin/p]\n";
        assert_eq!(help_inclusive(annotated), 1_500);
        assert_eq!(help_inclusive("no such lines\n"), 0);
    }

    /// The difference of two runs, per env-step, split into the calling
    /// thread and the rest.
    #[test]
    fn per_env_step_is_the_difference_over_the_steps() {
        let short = Counts::from([((7, 1), 1_000), ((7, 2), 500), ((7, 3), 500)]);
        let long = Counts::from([((7, 1), 3_000), ((7, 2), 2_500), ((7, 3), 1_500)]);
        assert_eq!(per_env_step(&short, &long, 100.0), (20.0, 30.0));
        // Worker processes (higher pids): every thread of theirs, thread 1
        // too, is a worker's.
        let short = Counts::from([((7, 1), 1_000), ((9, 1), 400), ((9, 2), 100)]);
        let long = Counts::from([((7, 1), 2_000), ((9, 1), 2_400), ((9, 2), 1_100)]);
        assert_eq!(per_env_step(&short, &long, 100.0), (10.0, 30.0));
    }
}
