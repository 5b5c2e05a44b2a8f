//! `cargo xtask test-ray`: `rlpool.ray` on a local two-node Ray cluster.
//! Never part of `test-all` (whose environment has no Ray).
//!
//! 1. A virtual environment of its own, `target/ray/venv`, made with
//!    `$PYTHON` (else `python3`) `-m venv` and filled from PyPI with the
//!    pinned versions of `python/requirements-ray.txt` (Ray, Gymnasium,
//!    numpy, cloudpickle, maturin, pytest). A stamp records that file and
//!    the interpreter; the environment is reused while both stay the same.
//! 2. The package built by maturin from the tree (a debug build with the
//!    bindings' `test-envs` feature, as `cargo xtask python` builds it) and
//!    installed into that environment.
//! 3. `pytest python/tests_ray` (the arguments given are passed on): its
//!    session fixture starts a head and a second node with `ray start` on
//!    the loopback and stops them at the end. Then the example of
//!    `rlpool.ray`'s docstring (`pytest --doctest-modules --pyargs
//!    rlpool.ray`, a single-node `ray.init` on the loopback), which
//!    `test-all` skips.
//! 4. No Ray process may survive the run: a `raylet` or `gcs_server` still
//!    alive a few seconds after the last step fails the command.
//!
//! Nothing is written to the source tree (no bytecode, no pytest cache).

use std::fs;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::python::Venv;
use crate::step;

/// The per-test deadline of pytest-timeout: a session's first test also
/// starts the cluster, which takes up to a minute on two loaded cores.
const TEST_TIMEOUT_S: &str = "300";

/// The variables every Ray process of the run gets: no usage report, no
/// token written to the home directory, no idle workers started ahead of
/// need.
const RAY_ENV: &[(&str, &str)] = &[
    ("RAY_USAGE_STATS_ENABLED", "0"),
    ("RAY_AUTH_MODE", "disabled"),
    ("RAY_enable_worker_prestart", "0"),
    ("RAY_prestart_worker_first_driver", "0"),
    ("RAY_health_check_failure_threshold", "10"),
];

/// The names of the processes that make a Ray node.
const RAY_DAEMONS: &[&str] = &["raylet", "gcs_server"];

/// pytest in Ray's environment ([`Venv::pytest`]) with the Ray variables
/// set.
fn pytest(venv: &Venv) -> Command {
    let mut command = venv.pytest();
    command.env_remove("RAY_ADDRESS");
    for (name, value) in RAY_ENV {
        command.env(name, value);
    }
    command
}

/// `cargo xtask test-ray [pytest arguments...]`.
pub(crate) fn command(pytest_args: &[String]) -> Result<(), String> {
    crate::python::suite("test-ray", Venv::ray(), pytest_args, |venv| {
        let result = run_tests(venv, pytest_args);
        result.and(check_no_ray_left())
    })
}

/// The tests on the two-node cluster, then the module's example.
fn run_tests(venv: &Venv, pytest_args: &[String]) -> Result<(), String> {
    let mut tests = pytest(venv);
    tests
        .arg("-rs")
        .arg(format!("--timeout={TEST_TIMEOUT_S}"))
        .arg("python/tests_ray")
        .args(pytest_args);
    step(
        "pytest python/tests_ray (a local two-node Ray cluster)",
        tests,
    )?;

    // A single-node `ray.init`: Ray keeps it on the loopback when told that
    // this is not a cluster.
    let mut example = pytest(venv);
    example
        .args(["-q", "--doctest-modules", "--pyargs", "rlpool.ray"])
        .arg(format!("--timeout={TEST_TIMEOUT_S}"))
        .env("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0");
    step("pytest --doctest-modules rlpool.ray (the example)", example)
}

/// The live processes named like a Ray node's daemons.
fn ray_daemons() -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let state = stat[close + 1..].split_whitespace().next().unwrap_or("");
        if RAY_DAEMONS.contains(&name) && state != "Z" && state != "X" {
            found.push((pid, name.to_string()));
        }
    }
    found
}

/// Fails if a Ray daemon is still alive a few seconds after the tests.
fn check_no_ray_left() -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = ray_daemons();
        if left.is_empty() {
            println!("xtask: == no Ray process left");
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("Ray processes left after test-ray: {left:?}"));
        }
        thread::sleep(Duration::from_millis(200));
    }
}
