//! `cargo xtask bench --anchors`: rlpool side by side with the tools it is
//! measured against (Gymnasium's vector envs, EnvPool, PufferLib; TorchRL's
//! `AsyncEnvPool` with `--with-torchrl`), in one run.
//!
//! The work is done by the Python driver `xtask/anchors/anchors.py`, run
//! with the machine's `python3` (or `$PYTHON`): it creates one virtual
//! environment per anchor under `target/bench/venv/` (reused when present),
//! pip-installs the anchors (an anchor that fails to install is reported in
//! the output and the JSON, and the run goes on), measures every workload on
//! each system in turn (rlpool through `rlpool bench --json --bare`, built
//! here in release first), then writes `target/bench/anchors.json` and the
//! plot `target/bench/anchors.svg`.
//!
//! The workloads come in sets, chosen with `--sets a,b` (default: all):
//! `core`, issue 14's (rlpool's own Rust envs beside each anchor's
//! cheapest equivalent); `python` and `atari`, issue 15's real workloads
//! (Gymnasium's Python CartPole-v1 and ALE Pong through ale-py in every
//! pool that runs Python envs, EnvPool and ale-py's vector env for Pong,
//! with the machine's bound and the goals). Each set has its own
//! sizes and seconds per measurement unless `--sizes`/`--seconds` are
//! given. The rlpool binary is built only when the core set runs.
//!
//! rlpool driven from Python is one of the systems: its venv,
//! `target/bench/venv/rlpool-python/`, gets maturin, numpy, gymnasium,
//! cloudpickle and ale-py from PyPI and, on every run, the package built
//! from this repository (`pip install` of the root, a release build in this
//! target directory: a few seconds when nothing changed). In the core set
//! its loops are `rlpool bench --bare`'s, so the run reports the Python
//! layer's cost per call and per env-step beside its rate over EnvPool's
//! (issue 14's goals).

use std::env;
use std::path::PathBuf;
use std::process::Command;

use crate::{cargo, root, step};

/// Arguments of `--anchors` that the driver takes, each with a value.
const VALUED: [&str; 3] = ["--seconds", "--sizes", "--sets"];

/// The set of workloads that needs the rlpool binary (rlpool driven from Rust).
const CORE_SET: &str = "core";

/// Runs the side-by-side benchmark; `args` are what followed `bench`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut forwarded = Vec::new();
    let mut core = true;
    let mut iter = args.iter().filter(|a| a.as_str() != "--anchors");
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--with-torchrl" => forwarded.push(arg.clone()),
            valued if VALUED.contains(&valued) => {
                let value = iter
                    .next()
                    .ok_or_else(|| format!("bench --anchors: {valued} needs a value"))?;
                if valued == "--sets" {
                    core = value.split(',').any(|set| set.trim() == CORE_SET);
                }
                forwarded.extend([arg.clone(), value.clone()]);
            }
            other => {
                return Err(format!(
                    "bench --anchors: unknown argument `{other}` (takes --with-torchrl, \
                     --sets core,python,atari, --seconds S, --sizes N,N,...)"
                ))
            }
        }
    }

    if core {
        let mut build = cargo();
        build.args(["build", "--release", "-p", "rlpool-cli", "--bin", "rlpool"]);
        step("cargo build --release (rlpool)", build)?;
    }

    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let bench = target.join("bench");
    let python = env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let command = std::iter::once("cargo xtask bench --anchors".to_string())
        .chain(forwarded.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");

    let mut driver = Command::new(&python);
    driver
        .current_dir(root())
        .arg(root().join("xtask").join("anchors").join("anchors.py"))
        .arg("run");
    if core {
        driver
            .arg("--rlpool")
            .arg(target.join("release").join("rlpool"));
    }
    driver
        .arg("--venvs")
        .arg(bench.join("venv"))
        .arg("--out")
        .arg(bench.join("anchors.json"))
        .arg("--svg")
        .arg(bench.join("anchors.svg"))
        .args(["--command", &command])
        .args(["--git-commit", &git_commit()])
        .args(["--rustc", &output_of("rustc", &["--version"])])
        .args(&forwarded);
    step("anchors.py (venvs, anchors, rlpool, JSON, plot)", driver).map_err(|err| {
        format!(
            "{err}; the driver needs {} with its venv module",
            python.to_string_lossy()
        )
    })
}

/// The commit measured, with `-dirty` when the work tree has changes.
fn git_commit() -> String {
    let commit = output_of("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !output_of("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

/// The trimmed standard output of a command run at the root, or `unknown`.
pub(crate) fn output_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}
