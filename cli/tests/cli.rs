//! The `rlpool` program: its help, its argument errors (one line, status
//! 2), a short run of each kind with its JSON summary, the env list, the
//! benchmark table, Ctrl-C (a summary, status 0, every worker reaped), and a
//! closed stdout (status 0, no panic).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn rlpool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlpool"))
        .args(args)
        .output()
        .expect("run rlpool")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; stderr: {}", text(&out.stderr)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn help_names_every_command_and_option() {
    let out = rlpool(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in ["run", "bench", "envs", "--version"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    let out = rlpool(&["run", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for option in [
        "--env",
        "--num-envs",
        "--backend",
        "--exchange",
        "--envs-per-worker",
        "--threads",
        "--min-get",
        "--max-get",
        "--timeout-ms",
        "--steps",
        "--seconds",
        "--seed",
        "--sync",
        "--json",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
    for sub in ["bench", "envs"] {
        assert!(rlpool(&[sub, "--help"]).status.success());
    }
    assert!(text(&rlpool(&["--version"]).stdout).starts_with("rlpool "));
}

#[test]
fn bad_arguments_print_one_line_and_exit_with_2() {
    for (args, message) in [
        (&["run", "--env", "Nope"][..], "unknown env \"Nope\""),
        (&["run", "--num-envs", "0"], "--num-envs"),
        (
            &["run", "--num-envs", "4", "--min-get", "5"],
            "--min-get 5 is above --num-envs 4",
        ),
        (
            &["run", "--min-get", "4", "--max-get", "2"],
            "--max-get 2 is below --min-get 4",
        ),
        (&["run", "--backend", "gpu"], "gpu"),
        (&["run", "--seconds", "nan"], "--seconds"),
        (
            &["run", "--threads", "2"],
            "--threads applies to --backend threads",
        ),
        (
            &["run", "--backend", "threads", "--envs-per-worker", "2"],
            "--envs-per-worker applies",
        ),
        (
            &["run", "--backend", "threads", "--exchange", "shm"],
            "--exchange applies to --backend processes, not --backend threads",
        ),
        (
            &["run", "--backend", "threads", "--exchange", "queue"],
            "--exchange applies to --backend processes",
        ),
        (&["run", "--steps", "0"], "--steps"),
        (
            &["run", "--sync", "--min-get", "2"],
            "--min-get applies to asynchronous runs, not --sync",
        ),
        (&["run", "--bogus"], "--bogus"),
        (&["fly"], "fly"),
        (&["bench", "--env", "Nope"], "unknown env"),
        (&["bench", "--sizes", "0"], "--sizes"),
    ] {
        let out = rlpool(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("rlpool: "), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn short_runs_report_json() {
    for args in [
        &["run", "--num-envs", "4", "--seconds", "0.3", "--json"][..],
        &[
            "run",
            "--num-envs",
            "4",
            "--seconds",
            "0.3",
            "--exchange",
            "queue",
            "--json",
        ],
        &[
            "run",
            "--backend",
            "threads",
            "--sync",
            "--steps",
            "200",
            "--json",
        ],
        &[
            "run",
            "--env",
            "Pendulum-v1",
            "--num-envs",
            "3",
            "--min-get",
            "1",
            "--max-get",
            "2",
            "--timeout-ms",
            "50",
            "--seconds",
            "0.3",
            "--json",
        ],
    ] {
        let out = rlpool(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let summary = json(&out);
        assert!(summary["steps"].as_u64().unwrap() > 0, "{summary}");
        assert!(
            summary["steps_per_second"].as_f64().unwrap() > 0.0,
            "{summary}"
        );
        assert_eq!(summary["interrupted"], false);
    }
    let out = rlpool(&["run", "--num-envs", "4", "--seconds", "0.3", "--json"]);
    let summary = json(&out);
    assert_eq!(summary["exchange"], "shm");
    assert_eq!(summary["backend"], "processes");
    // Counts are integers, ratios numbers.
    assert!(
        summary["stats"]["batches"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert!(summary["stats"]["items"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["stats"]["batch_fill_ratio"].is_f64(), "{summary}");
    // Threads need no exchange: none is reported.
    let out = rlpool(&["run", "--backend", "threads", "--steps", "100", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = json(&out);
    assert_eq!(summary["backend"], "threads");
    assert!(summary["exchange"].is_null(), "{summary}");
    assert!(summary["steps"].as_u64().unwrap() >= 100, "{summary}");
}

#[test]
fn the_main_job_shows_a_summary() {
    let out = Command::new(env!("CARGO_BIN_EXE_rlpool"))
        .args(["run", "--seconds", "0.5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for line in [
        "steps:",
        "throughput:",
        "episodes:",
        "mean return:",
        "exchange:     shm",
        "stats:",
        "batch_fill_ratio",
    ] {
        assert!(stdout.contains(line), "{line} missing from:\n{stdout}");
    }
    // Counts are whole numbers; only averages and ratios have decimals.
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{stdout}"))
            .trim()
            .to_owned()
    };
    for count in ["steps:", "episodes:", "batches ", "items "] {
        let shown = value(count);
        assert!(shown.parse::<u64>().is_ok(), "{count} {shown}:\n{stdout}");
    }
    assert!(value("batch_fill_ratio").contains('.'), "{stdout}");
    let out = rlpool(&["run", "--backend", "threads", "--steps", "100"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("exchange:     none (threads"),
        "threads report no exchange:\n{stdout}"
    );
}

#[test]
fn envs_and_bench_list_what_they_should() {
    let out = rlpool(&["envs"]);
    assert!(out.status.success());
    let list = text(&out.stdout);
    for name in [
        "CartPole-v1",
        "Pendulum-v1",
        "CountingEnv",
        "LatencyEnv",
        "action:",
        "observation:",
    ] {
        assert!(list.contains(name), "{name} missing from:\n{list}");
    }
    let out = rlpool(&[
        "bench",
        "--env",
        "CountingEnv",
        "--sizes",
        "2",
        "--seconds",
        "0.05",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The raw loop, then 3 configurations x sync and async.
    assert_eq!(rows.len(), 7);
    assert!(rows
        .iter()
        .all(|r| r["steps_per_second"].as_f64().unwrap() > 0.0));
    // Each pool row with the raw loop's rate beside it and the paired
    // ratio; the raw loop's row with neither.
    assert!(rows[0]["paired_ratio"].is_null(), "{}", rows[0]);
    for row in &rows[1..] {
        for key in ["paired_ratio", "paired_raw_steps_per_second"] {
            assert!(row[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {row}");
        }
    }
}

#[test]
fn ctrl_c_ends_a_run_with_its_summary_and_reaps_the_workers() {
    let child = Command::new(env!("CARGO_BIN_EXE_rlpool"))
        .args(["run", "--seconds", "60", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let start = Instant::now();
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = json(&out);
    assert_eq!(summary["interrupted"], true);
    let pids: Vec<u64> = summary["worker_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} left"
        );
    }
}

/// Runs `rlpool` with its stdout a pipe whose read end is closed before the
/// program starts, as `rlpool envs | head -1` leaves it once `head` is done.
fn rlpool_into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = rustix::pipe::pipe().expect("a pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_rlpool"))
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run rlpool")
}

#[test]
fn a_closed_stdout_ends_the_program_quietly() {
    for args in [
        &["envs"][..],
        &["--help"],
        &["run", "--help"],
        // The header line, then (unreached) the summary.
        &["run", "--backend", "threads", "--steps", "50"],
        &["run", "--num-envs", "2", "--seconds", "0.2"],
        // Only the JSON line at the end.
        &["run", "--num-envs", "2", "--seconds", "0.2", "--json"],
        &["run", "--backend", "threads", "--steps", "50", "--json"],
        &[
            "bench",
            "--env",
            "CountingEnv",
            "--sizes",
            "2",
            "--seconds",
            "0.05",
            "--json",
        ],
        &[
            "bench",
            "--env",
            "CountingEnv",
            "--sizes",
            "2",
            "--seconds",
            "0.05",
        ],
    ] {
        let out = rlpool_into_closed_pipe(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}
