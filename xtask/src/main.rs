//! Developer commands for the rlpool workspace (the cargo-xtask pattern).
//!
//! `cargo xtask test-all` runs every check we have: formatting, clippy with
//! warnings denied, the whole test suite (unit, integration and doc tests),
//! the loom models of the exchange and liveness protocols (`cargo xtask
//! loom`), and the Python package's checks (`cargo xtask python`: the package
//! built into a virtual environment under `target/python`, then ruff, mypy
//! and pytest; see `python.rs`).
//! `cargo xtask bench` runs the benchmarks; `cargo xtask bench --anchors`
//! measures rlpool side by side with EnvPool, PufferLib and Gymnasium (see
//! `anchors.rs`); `cargo xtask perf-report` regenerates the table of current
//! figures in `docs/performance.md` (see `report.rs`); `cargo xtask
//! instructions` counts instructions per env-step with callgrind (see
//! `instructions.rs`); `cargo xtask fuzz` builds the fuzz targets of `fuzz/`
//! with libFuzzer and runs them; `cargo xtask soak` runs the soak test. The
//! binary needs nothing but cargo and rustc (and, for `fuzz`, a C++
//! compiler; for `test-all` and `python`, a Python 3.11 or later with `venv`
//! and access to PyPI the first time): it finds the workspace root from its own manifest
//! directory and runs cargo through `$CARGO`.
#![forbid(unsafe_code)]

mod anchors;
mod instructions;
mod python;
mod ray;
mod report;
mod torchrl;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

pub(crate) const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test-all   cargo fmt --check, cargo clippy (warnings denied), cargo test --workspace,
             cargo doc (warnings denied), the benchmarks once in test mode, loom,
             then the Python steps of `python`
  python [pytest arguments...]
             the Python package alone: a venv in target/python/venv ($PYTHON or
             python3 -m venv, filled from PyPI with python/requirements-dev.txt,
             made anew when that file changes), the package built by maturin
             (debug, feature test-envs) and installed into it, ruff check,
             ruff format --check, mypy, and pytest with the arguments given
  test-torchrl [pytest arguments...]
             rlpool.torchrl against TorchRL: its own venv in target/torchrl/venv
             (python/requirements-torchrl.txt: torch, tensordict, torchrl; several
             GB from PyPI the first time, reused after), the package built and
             installed into it, the module's example, and pytest on
             python/tests_torchrl; never part of test-all
  bench      run the benchmarks (divan) of every crate that has some;
             extra arguments are passed to the benchmark binaries
  bench --anchors [--sets core,python,atari] [--with-torchrl] [--seconds S]
                  [--sizes N,N,...]
             rlpool side by side with Gymnasium, EnvPool and PufferLib (and
             TorchRL: a download of several GB). Sets: core (rlpool's Rust
             CartPole-v1 and a no-op env against each system's own, N in
             {2, 8, 32, 64}, 0.5 s per measurement), python (Gymnasium's
             Python CartPole-v1 in every system, N in {8, 32, 64}, and the
             machine's bound), atari (Pong through ale-py and EnvPool's Pong,
             N in {8, 16}); all three by default. Needs python3 and PyPI; one
             venv per anchor under target/bench/venv (reused); writes
             target/bench/anchors.json and anchors.svg
  loom       model-check the exchange and liveness protocols with loom (--cfg loom, release,
             target/loom; LOOM_MAX_PREEMPTIONS=3 unless already set)
  soak       --minutes N: two process pools (queue and shm exchanges) driven at
             random for N minutes, every result checked, memory and descriptors
             watched (pool/examples/soak.rs)
  fuzz [--seconds N] [--target T]...
             build the fuzz targets of fuzz/ (libFuzzer, stable coverage flags,
             target/fuzz) and run each for N seconds (default 60) from its
             committed corpus; fails on a crash and prints the input's path
  perf-report [--smoke]
             one run of pool/benches/paired.rs and of the backends.rs rows the
             table needs (LatencyEnv speed-ups, shm over queue), written into
             the table of current figures in docs/performance.md with the
             date, commit and machine; --smoke: a debug build, a few samples,
             the table printed, nothing written
  instructions [--modes raw,sync,sync_samr] [--envs 64] [--env CartPole-v1] [--native-runs] [--procs]
             issue 17's instruction counts: pool/examples/profile_pool.rs under
             valgrind's callgrind at two iteration counts, the calling thread's
             and the workers' instructions per env-step (the difference over the
             env-steps between), the calling thread's outside of helping, the
             whole pool over the raw loop; needs valgrind;
             files in target/instructions; --native-runs: built apart with
             publication runs as long as native ones (target/instructions-native);
             --procs: the process backend (callgrind follows the worker processes)
  test-ray [pytest arguments...]
             rlpool.ray on a local two-node Ray cluster (see ray.rs): its own venv in
             target/ray/venv from python/requirements-ray.txt (PyPI, reused), the
             package built from the tree, pytest python/tests_ray, the rlpool.ray
             example; never part of test-all
  help       print this message";

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    let command = args.next();
    let rest: Vec<String> = args.collect();
    let result = match command.as_deref() {
        Some("test-all") => test_all(),
        Some("python") => python::command(&rest),
        Some("test-torchrl") => torchrl::command(&rest),
        Some("bench") => bench(&rest),
        Some("loom") => loom(),
        Some("soak") => soak(&rest),
        Some("fuzz") => fuzz(&rest),
        Some("perf-report") => report::run(&rest),
        Some("instructions") => instructions::run(&rest),
        Some("test-ray") => ray::command(&rest),
        Some("help") | Some("--help") | Some("-h") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo that runs us (`$CARGO`), or `cargo` from the path.
fn cargo() -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(root());
    command
}

/// A command as a line to paste into a shell from the workspace root: the
/// variables it sets (but `PATH`), the program and its arguments, quoted
/// where needed.
fn command_line(command: &Command) -> String {
    let quote = |part: &std::ffi::OsStr| {
        let part = part.to_string_lossy();
        if !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            part.into_owned()
        } else {
            format!("'{}'", part.replace('\'', r"'\''"))
        }
    };
    let vars = command
        .get_envs()
        .filter(|(name, _)| *name != "PATH")
        .filter_map(|(name, value)| {
            value.map(|v| format!("{}={}", name.to_string_lossy(), quote(v)))
        });
    vars.chain(
        std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(quote),
    )
    .collect::<Vec<_>>()
    .join(" ")
}

/// Runs one step, printing its name and duration; an error names the step
/// and the command that was run.
fn step(name: &str, mut command: Command) -> Result<(), String> {
    println!("xtask: == {name}");
    let start = Instant::now();
    let status = command.status().map_err(|err| {
        format!(
            "{name}: could not start {}: {err}",
            command.get_program().to_string_lossy()
        )
    })?;
    println!(
        "xtask: == {name}: {} in {:.1}s",
        if status.success() { "ok" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{name} failed ({status}); the command was:\n  {}",
            command_line(&command)
        ))
    }
}

fn test_all() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("cargo fmt --check", fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    step("cargo clippy", clippy)?;

    let mut test = cargo();
    test.args(["test", "--workspace"]);
    step("cargo test --workspace", test)?;

    // Broken intra-doc links and malformed docs fail here.
    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    step("cargo doc (warnings denied)", doc)?;

    // Benchmarks are compiled by clippy --all-targets; run them once, briefly,
    // in test mode so a broken benchmark fails here and not only under
    // `cargo xtask bench`.
    let mut bench_smoke = cargo();
    bench_smoke.args(["test", "--workspace", "--benches"]);
    step("benchmarks in test mode", bench_smoke)?;

    loom()?;

    python::run(&[])
}

fn bench(extra: &[String]) -> Result<(), String> {
    if extra.iter().any(|a| a == "--anchors") {
        return anchors::run(extra);
    }
    if extra.iter().any(|a| a == "--with-torchrl") {
        return Err("--with-torchrl goes with --anchors".to_string());
    }
    let mut bench = cargo();
    bench.args(["bench", "--workspace"]);
    if !extra.is_empty() {
        bench.arg("--").args(extra);
    }
    step("cargo bench", bench)
}

/// Model-checks the exchange protocol (`exchange/tests/loom.rs`) and the
/// backends' liveness protocol (`pool-core/tests/loom.rs`) with loom.
///
/// `--cfg loom` changes every crate's build, so it gets its own target
/// directory and leaves the normal build alone. The preemption bound keeps
/// the run short; set `LOOM_MAX_PREEMPTIONS` to explore more.
fn soak(extra: &[String]) -> Result<(), String> {
    let mut soak = cargo();
    soak.args(["run", "--release", "-p", "pool", "--example", "soak", "--"])
        .args(extra);
    step("soak", soak)
}

fn loom() -> Result<(), String> {
    let mut rustflags = env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(' ');
    }
    rustflags.push_str("--cfg loom");
    let mut loom = cargo();
    loom.args([
        "test",
        "-p",
        "exchange",
        "-p",
        "pool-core",
        "--test",
        "loom",
        "--release",
    ])
    .arg("--target-dir")
    .arg(root().join("target").join("loom"))
    .env("RUSTFLAGS", rustflags);
    if env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        loom.env("LOOM_MAX_PREEMPTIONS", "3");
    }
    step(
        "loom models of the exchange protocol and the backends' liveness",
        loom,
    )
}

/// The flags that make a build a libFuzzer build with the stable compiler:
/// LLVM's coverage instrumentation (what `cargo fuzz build -s none` passes),
/// `cfg(fuzzing)`, and debug assertions and overflow checks, so that an
/// arithmetic overflow is a crash rather than a wrapped value.
const FUZZ_RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
];

/// The longest input the fuzzer makes (the decoders' allocation cap in
/// `fuzz::MAX_ALLOCATION` is set far above it).
const FUZZ_MAX_LEN: usize = 64 * 1024;

/// Builds the fuzz targets and runs each for `--seconds` (see `USAGE`).
///
/// The targets are the folders of `fuzz/corpus/` (the corpus replay test
/// checks that they are the crate's targets). Each run reads the committed
/// seeds and writes what it finds to `target/fuzz/corpus/<target>/` (kept
/// between runs, never committed); a crash is written under
/// `target/fuzz/artifacts/<target>/` and fails the command.
fn fuzz(args: &[String]) -> Result<(), String> {
    let mut seconds = 60u64;
    let mut chosen = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--seconds" => {
                let v = value("--seconds")?;
                seconds = v
                    .parse()
                    .map_err(|_| format!("--seconds {v}: not a whole number"))?;
            }
            "--target" => chosen.push(value("--target")?),
            other => return Err(format!("fuzz: unknown argument `{other}`\n\n{USAGE}")),
        }
    }
    let seeds = root().join("fuzz").join("corpus");
    let mut targets: Vec<String> = std::fs::read_dir(&seeds)
        .map_err(|e| format!("{}: {e}", seeds.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    targets.sort();
    if let Some(unknown) = chosen.iter().find(|t| !targets.contains(t)) {
        return Err(format!(
            "no fuzz target `{unknown}`; the targets: {}",
            targets.join(", ")
        ));
    }
    if !chosen.is_empty() {
        targets.retain(|t| chosen.contains(t));
    }

    // Build for the host triple named explicitly, so that the flags reach
    // the targets but not build scripts and proc macros.
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("could not run rustc -vV: {e}"))?;
    let host = String::from_utf8_lossy(&version.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or("rustc -vV printed no host triple")?;
    let dir = root().join("target").join("fuzz");
    let mut rustflags = env::var("RUSTFLAGS").unwrap_or_default();
    for flag in FUZZ_RUSTFLAGS {
        if !rustflags.is_empty() {
            rustflags.push(' ');
        }
        rustflags.push_str(flag);
    }
    let mut build = cargo();
    build
        .args([
            "build",
            "--release",
            "-p",
            "fuzz",
            "--features",
            "libfuzzer",
            "--bins",
        ])
        .args(["--target", &host])
        .arg("--target-dir")
        .arg(&dir)
        .env("RUSTFLAGS", rustflags);
    step("build the fuzz targets (libFuzzer)", build).map_err(|e| {
        format!(
            "{e}\nthe fuzz targets need only the stable toolchain and a C++ compiler \
             for libFuzzer (libfuzzer-sys builds it with the cc crate): \
             `apt-get install g++` (or clang) if none is found"
        )
    })?;

    let mut crashed = Vec::new();
    let mut summary = Vec::new();
    for target in &targets {
        let work = dir.join("corpus").join(target);
        let artifacts = dir.join("artifacts").join(target);
        let logs = dir.join("logs");
        for d in [&work, &artifacts, &logs] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let log_path = logs.join(format!("{target}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut artifact_prefix = artifacts.into_os_string();
        artifact_prefix.push("/");
        let mut run = Command::new(dir.join(&host).join("release").join(target));
        run.arg(&work)
            .arg(seeds.join(target))
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={FUZZ_MAX_LEN}"))
            .arg("-timeout=10")
            .arg("-rss_limit_mb=2048")
            .arg("-print_final_stats=1")
            .arg({
                let mut a = std::ffi::OsString::from("-artifact_prefix=");
                a.push(&artifact_prefix);
                a
            })
            .current_dir(root())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        println!(
            "xtask: == fuzz {target} for {seconds}s (log: {})",
            log_path.display()
        );
        let start = Instant::now();
        let status = run
            .status()
            .map_err(|e| format!("could not start the fuzz target {target}: {e}"))?;
        let elapsed = start.elapsed().as_secs_f64();
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let stat = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| "?".into())
        };
        let line =
            format!(
            "{target}: {} executions in {elapsed:.0}s ({}/s), {} new inputs, peak RSS {} MB: {}",
            stat("number_of_executed_units"),
            stat("average_exec_per_sec"),
            stat("new_units_added"),
            stat("peak_rss_mb"),
            if status.success() { "no crash" } else { "FAILED" },
        );
        println!("xtask: == {line}");
        summary.push(line);
        if !status.success() {
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            for l in tail.iter().rev() {
                eprintln!("  {l}");
            }
            let input = text
                .lines()
                .find_map(|l| l.split_once("Test unit written to ").map(|(_, p)| p.trim()))
                .unwrap_or("(no input written; see the log)")
                .to_owned();
            eprintln!("xtask: fuzz target {target} failed ({status}); the input: {input}");
            crashed.push(format!("{target}: {input}"));
        }
    }
    println!("xtask: fuzzing summary ({host}, {seconds}s per target):");
    for line in &summary {
        println!("  {line}");
    }
    if crashed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "fuzz targets failed; replay an input with target/fuzz/{host}/release/<target> <input>:\n  {}",
            crashed.join("\n  ")
        ))
    }
}
