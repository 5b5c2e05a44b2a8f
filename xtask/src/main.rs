//! Developer commands for the rlpool workspace (the cargo-xtask pattern).
//!
//! `cargo xtask test-all` runs every check we have: formatting, clippy with
//! warnings denied, the whole test suite (unit, integration and doc tests)
//! and the loom models of the exchange protocol (`cargo xtask loom`).
//! `cargo xtask bench` runs the benchmarks; `cargo xtask bench --anchors`
//! measures rlpool side by side with EnvPool, PufferLib and Gymnasium (see
//! `anchors.rs`). The binary needs nothing
//! but cargo and rustc: it finds the workspace root from its own manifest
//! directory and runs cargo through `$CARGO`.
#![forbid(unsafe_code)]

mod anchors;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test-all   cargo fmt --check, cargo clippy (warnings denied), cargo test --workspace,
             cargo doc (warnings denied), the benchmarks once in test mode, loom
  bench      run the benchmarks (divan) of every crate that has some;
             extra arguments are passed to the benchmark binaries
  bench --anchors [--with-torchrl] [--seconds S] [--sizes N,N,...]
             rlpool side by side with Gymnasium, EnvPool and PufferLib (and
             TorchRL: a download of several GB) on CartPole-v1 and a no-op env,
             sync and async, N in {2, 8, 32, 64}, 0.5 s per measurement: needs
             python3 and PyPI; one venv per anchor under target/bench/venv
             (reused); writes target/bench/anchors.json and anchors.svg
  loom       model-check the exchange protocol with loom (--cfg loom, release,
             target/loom; LOOM_MAX_PREEMPTIONS=3 unless already set)
  help       print this message";

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    let command = args.next();
    let rest: Vec<String> = args.collect();
    let result = match command.as_deref() {
        Some("test-all") => test_all(),
        Some("bench") => bench(&rest),
        Some("loom") => loom(),
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

/// Runs one step, printing its name and duration; an error names the step.
fn step(name: &str, mut command: Command) -> Result<(), String> {
    println!("xtask: == {name}");
    let start = Instant::now();
    let status = command
        .status()
        .map_err(|err| format!("{name}: could not start cargo: {err}"))?;
    println!(
        "xtask: == {name}: {} in {:.1}s",
        if status.success() { "ok" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
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

    loom()
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

/// Model-checks the exchange protocol (`exchange/tests/loom.rs`) with loom.
///
/// `--cfg loom` changes every crate's build, so it gets its own target
/// directory and leaves the normal build alone. The preemption bound keeps
/// the run short; set `LOOM_MAX_PREEMPTIONS` to explore more.
fn loom() -> Result<(), String> {
    let mut rustflags = env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(' ');
    }
    rustflags.push_str("--cfg loom");
    let mut loom = cargo();
    loom.args(["test", "-p", "exchange", "--test", "loom", "--release"])
        .arg("--target-dir")
        .arg(root().join("target").join("loom"))
        .env("RUSTFLAGS", rustflags);
    if env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        loom.env("LOOM_MAX_PREEMPTIONS", "3");
    }
    step("loom models of the exchange protocol", loom)
}
