//! `cargo xtask perf-report`: one run of the benchmarks behind the table of
//! current figures in `docs/performance.md`, and that table rewritten.
//!
//! It runs `cargo bench -p pool --bench paired` (the overheads per
//! env-step, as paired samples) and the benchmarks of `backends.rs` that
//! give the speed-ups (`latency_50us`, 8 envs) and the shm-over-queue ratio
//! (`cartpole`, 32 envs, `sync_step`), parses what they print, and replaces
//! the text between [`BEGIN`] and [`END`] with the figures, the date, the
//! commit, the machine and the command. `--smoke` runs both in a debug
//! build with a few samples and prints the block without writing it.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use crate::{cargo, root};

/// The marker that opens the generated block of `docs/performance.md`.
pub(crate) const BEGIN: &str = "<!-- perf-report:begin -->";
/// The marker that closes it.
pub(crate) const END: &str = "<!-- perf-report:end -->";

/// The divan benchmarks of `backends.rs` the table needs (a regular
/// expression over divan's benchmark paths).
const BACKENDS_FILTER: &str =
    "latency_50us::raw::8|latency_50us::sync_step::8::(threads|procs_shm)\
     |cartpole::sync_step::32::procs_(queue|shm)$";

/// One row of `paired.rs`'s output, per env-step, in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairedRow {
    pub(crate) title: String,
    pub(crate) pool_ns: f64,
    pub(crate) baseline_ns: f64,
    pub(crate) q1_ns: f64,
    pub(crate) median_ns: f64,
    pub(crate) q3_ns: f64,
    pub(crate) target: String,
    pub(crate) pairs: usize,
}

/// Parses the rows of `paired.rs`'s output; other lines are skipped.
///
/// A row reads `<title> <pool> ns <baseline> ns <median> ns (<q1> .. <q3>)
/// <target> [<n> pairs]`, columns padded with spaces.
pub(crate) fn parse_paired(output: &str) -> Vec<PairedRow> {
    output.lines().filter_map(parse_paired_line).collect()
}

fn parse_paired_line(line: &str) -> Option<PairedRow> {
    let line = line.trim_end();
    let (body, pairs) = line.rsplit_once('[')?;
    let pairs = pairs.strip_suffix(" pairs]")?.trim().parse().ok()?;
    let tokens: Vec<&str> = body.split_whitespace().collect();
    let number = |s: &str| s.parse::<f64>().ok();
    let at = (0..tokens.len().saturating_sub(8)).find(|&i| {
        number(tokens[i]).is_some()
            && tokens[i + 1] == "ns"
            && number(tokens[i + 2]).is_some()
            && tokens[i + 3] == "ns"
            && number(tokens[i + 4]).is_some()
            && tokens[i + 5] == "ns"
            && tokens[i + 6].starts_with('(')
            && tokens[i + 7] == ".."
            && tokens[i + 8].ends_with(')')
    })?;
    Some(PairedRow {
        title: tokens[..at].join(" "),
        pool_ns: number(tokens[at])?,
        baseline_ns: number(tokens[at + 2])?,
        median_ns: number(tokens[at + 4])?,
        q1_ns: number(tokens[at + 6].trim_start_matches('('))?,
        q3_ns: number(tokens[at + 8].trim_end_matches(')'))?,
        target: tokens[at + 9..].join(" "),
        pairs,
    })
}

/// Parses divan's tree output into the median time, in nanoseconds, of
/// each benchmark, keyed by its path (`["latency_50us", "raw", "8"]`; the
/// binary's own name, the tree's root, left out).
pub(crate) fn parse_divan(output: &str) -> BTreeMap<Vec<String>, f64> {
    let mut path: Vec<String> = Vec::new();
    let mut medians = BTreeMap::new();
    for line in output.lines() {
        // The tree's prefix: 3-character groups of "│  " or "   ", then a
        // branch "├─ " or "╰─ ". Lines without a branch (the root, the
        // throughput lines under a leaf, blank lines) name nothing.
        let mut rest = line;
        let mut depth = 0;
        while let Some(r) = rest
            .strip_prefix("│  ")
            .or_else(|| rest.strip_prefix("   "))
        {
            rest = r;
            depth += 1;
        }
        let Some(named) = rest
            .strip_prefix("├─ ")
            .or_else(|| rest.strip_prefix("╰─ "))
        else {
            continue;
        };
        let (name, columns) = match named.find("  ") {
            Some(at) => (&named[..at], &named[at..]),
            None => (named.trim_end(), ""),
        };
        path.truncate(depth);
        path.push(name.trim().to_string());
        // Columns: fastest │ slowest │ median │ mean │ samples │ iters.
        let fields: Vec<&str> = columns.split('│').map(str::trim).collect();
        if let Some(median) = fields.get(2).and_then(|f| parse_duration_ns(f)) {
            medians.insert(path.clone(), median);
        }
    }
    medians
}

/// `"405.2 µs"` as nanoseconds (divan's units, `ps` to `s`).
fn parse_duration_ns(text: &str) -> Option<f64> {
    let (value, unit) = text.split_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let scale = match unit.trim() {
        "ps" => 1e-3,
        "ns" => 1.0,
        "µs" | "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    Some(value * scale)
}

/// The median of the benchmark at `path` (given without the binary's name).
fn divan_median(medians: &BTreeMap<Vec<String>, f64>, path: &[&str]) -> Result<f64, String> {
    medians
        .iter()
        .find(|(p, _)| p.len() >= path.len() && p[p.len() - path.len()..] == *path)
        .map(|(_, &m)| m)
        .ok_or_else(|| format!("backends.rs printed no median for `{}`", path.join("::")))
}

/// The table of the generated block, from one run's outputs.
pub(crate) fn tables(
    paired: &[PairedRow],
    divan: &BTreeMap<Vec<String>, f64>,
) -> Result<String, String> {
    if paired.is_empty() {
        return Err("paired.rs printed no row".to_string());
    }
    let mut out = String::new();
    out.push_str("| row | overhead per env-step: paired median (IQR) | pool / baseline per env-step | target |\n");
    out.push_str("|---|---|---|---|\n");
    for row in paired {
        out.push_str(&format!(
            "| {} | {:.0} ns ({:.0} .. {:.0}; {} pairs) | {:.0} / {:.0} ns | {} |\n",
            row.title,
            row.median_ns,
            row.q1_ns,
            row.q3_ns,
            row.pairs,
            row.pool_ns,
            row.baseline_ns,
            row.target
        ));
    }
    let raw = divan_median(divan, &["latency_50us", "raw", "8"])?;
    let sync = |kind: &str| divan_median(divan, &["latency_50us", "sync_step", "8", kind]);
    let speed_up =
        |kind: &str| -> Result<String, String> { Ok(format!("{:.2}x", raw / sync(kind)?)) };
    let queue = divan_median(divan, &["cartpole", "sync_step", "32", "procs_queue"])?;
    let shm = divan_median(divan, &["cartpole", "sync_step", "32", "procs_shm"])?;
    out.push('\n');
    out.push_str("| row | figure (divan medians) | target |\n|---|---|---|\n");
    let rows = [
        (
            "threads (2), LatencyEnv 50 us x 8, step: speed-up over one thread",
            speed_up("threads")?,
            "issue 3: >= 1.8x",
        ),
        (
            "procs shm (2), LatencyEnv 50 us x 8, step: speed-up over one thread",
            speed_up("procs_shm")?,
            "issue 5: >= 1.8x",
        ),
        (
            "procs shm pinned (2), LatencyEnv 50 us x 8, step: speed-up over one thread",
            speed_up("procs_shm_pinned")?,
            "",
        ),
        (
            "procs (2), CartPole x32, step: shm throughput over queue",
            format!("{:.1}x", queue / shm),
            "issue 5: >= 3x",
        ),
    ];
    for (what, figure, target) in rows {
        out.push_str(&format!("| {what} | {figure} | {target} |\n"));
    }
    Ok(out)
}

/// `text` with what lies between the markers replaced by `block`.
pub(crate) fn splice(text: &str, block: &str) -> Result<String, String> {
    let start = text
        .find(BEGIN)
        .ok_or_else(|| format!("no `{BEGIN}` marker"))?;
    let end = text[start..]
        .find(END)
        .map(|at| start + at)
        .ok_or_else(|| format!("no `{END}` marker after `{BEGIN}`"))?;
    Ok(format!(
        "{}{BEGIN}\n{}{}",
        &text[..start],
        block,
        &text[end..]
    ))
}

/// Runs `command`, its standard error shown as it comes (cargo's build
/// progress), and returns its standard output, which is echoed too.
fn capture(name: &str, mut command: Command) -> Result<String, String> {
    println!("xtask: == {name}");
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("{name}: could not start cargo: {err}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{stdout}");
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{name} failed ({})", output.status))
    }
}

/// The first line a command run at the root prints, or `"?"`.
fn first_line(program: &str, args: &[&str]) -> String {
    match crate::anchors::output_of(program, args) {
        out if out == "unknown" => "?".to_owned(),
        out => out.lines().next().unwrap_or("?").to_owned(),
    }
}

/// Date, commit and machine of this run, as one paragraph.
fn provenance(load_before: &str) -> String {
    let date = first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let mut commit = first_line("git", &["rev-parse", "--short", "HEAD"]);
    let changed = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(root())
        .output()
        .map(|out| !out.stdout.is_empty())
        .unwrap_or(false);
    if changed {
        commit.push_str(" plus uncommitted changes");
    }
    let cpus = first_line("nproc", &[]);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
        })
        .unwrap_or_else(|| "?".to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|_| "?".to_string());
    let rustc = first_line("rustc", &["-V"]);
    format!(
        "Generated by `cargo xtask perf-report` on {date}, commit `{commit}`: \
         {cpus} CPUs (`nproc`) of an {model}, Linux {kernel}, {rustc}; load \
         average before the run {load_before} (`/proc/loadavg`). One run: \
         `cargo bench -p pool --bench paired`, then `cargo bench -p pool \
         --bench backends -- '{BACKENDS_FILTER}'`.\n\n"
    )
}

/// Runs the benchmarks and rewrites the block (see the module docs).
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut smoke = false;
    for arg in args {
        match arg.as_str() {
            "--smoke" => smoke = true,
            other => return Err(format!("perf-report: unknown argument `{other}`")),
        }
    }
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_string());
    // `cargo test` runs a bench binary without `--bench`: paired.rs then
    // takes a few pairs a row; divan is told `--bench` to time at all.
    let mode = if smoke { "test" } else { "bench" };
    let mut paired = cargo();
    paired.args([mode, "-p", "pool", "--bench", "paired"]);
    let paired = capture("paired.rs", paired)?;
    let mut backends = cargo();
    backends.args([mode, "-p", "pool", "--bench", "backends", "--"]);
    if smoke {
        backends.args(["--bench", "--sample-count", "3"]);
    }
    backends.arg(BACKENDS_FILTER);
    let backends = capture("backends.rs", backends)?;

    let block = format!(
        "{}{}",
        provenance(&load_before),
        tables(&parse_paired(&paired), &parse_divan(&backends))?
    );
    if smoke {
        println!("xtask: the block (smoke run: debug build, not written):\n\n{block}");
        return Ok(());
    }
    let path = root().join("docs").join("performance.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = splice(&text, &block).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("xtask: wrote the figures into {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `paired.rs`'s output, captured from `cargo xtask perf-report --smoke`
    /// (a debug build: the figures mean nothing, the format is the point).
    const PAIRED: &str = "\
paired samples: pool vs baseline, alternately (Pairs(8) a row)
row                                                              pool   baseline   overhead: paired median (IQR)      target
threads, CartPole x64, step                                  18669 ns    7741 ns   10928 ns (6147 .. 29706)           issue 3: <= 250 ns   [8 pairs]
threads, CartPole x64, step_and_maybe_reset                 101031 ns    8476 ns   92869 ns (4289 .. 159404)             [8 pairs]
threads, CartPole x64, async min_get=N/2 (samr)              12825 ns    9399 ns   6480 ns (-6490 .. 7155)            issue 3: <= 500 ns   [8 pairs]
procs shm (2), CartPole x32, step                           232549 ns    8523 ns   226951 ns (98093 .. 231175)        issue 5: <= 2000 ns   [8 pairs]
";

    /// divan's tree for a filter of `backends.rs`, captured from the same
    /// run.
    const DIVAN: &str = "\
Timer precision: 30 ns
backends                      fastest       │ slowest       │ median        │ mean          │ samples │ iters
├─ cartpole                                 │               │               │               │         │
│  ╰─ sync_step                             │               │               │               │         │
│     ╰─ 32                                 │               │               │               │         │
│        ├─ procs_queue       2.502 ms      │ 3.582 ms      │ 2.742 ms      │ 2.942 ms      │ 3       │ 3
│        │                    12.78 Kitem/s │ 8.932 Kitem/s │ 11.67 Kitem/s │ 10.87 Kitem/s │         │
│        ╰─ procs_shm         475.1 µs      │ 624 µs        │ 513.4 µs      │ 537.5 µs      │ 3       │ 3
│                             67.35 Kitem/s │ 51.27 Kitem/s │ 62.32 Kitem/s │ 59.53 Kitem/s │         │
╰─ latency_50us                             │               │               │               │         │
   ├─ raw                                   │               │               │               │         │
   │  ╰─ 8                    447 µs        │ 463.4 µs      │ 451.5 µs      │ 454 µs        │ 3       │ 3
   │                          17.89 Kitem/s │ 17.26 Kitem/s │ 17.71 Kitem/s │ 17.62 Kitem/s │         │
   ╰─ sync_step                             │               │               │               │         │
      ╰─ 8                                  │               │               │               │         │
         ├─ procs_queue       699.3 µs      │ 801.3 µs      │ 775.2 µs      │ 758.6 µs      │ 3       │ 3
         │                    11.43 Kitem/s │ 9.982 Kitem/s │ 10.31 Kitem/s │ 10.54 Kitem/s │         │
         ├─ procs_shm         346.1 µs      │ 459.1 µs      │ 368.6 µs      │ 391.3 µs      │ 3       │ 3
         │                    23.11 Kitem/s │ 17.42 Kitem/s │ 21.7 Kitem/s  │ 20.44 Kitem/s │         │
         ├─ procs_shm_pinned  427.8 µs      │ 3.18 ms       │ 611.6 µs      │ 1.406 ms      │ 3       │ 3
         │                    18.69 Kitem/s │ 2.515 Kitem/s │ 13.07 Kitem/s │ 5.687 Kitem/s │         │
         ╰─ threads           314 µs        │ 411 µs        │ 358 µs        │ 361 µs        │ 3       │ 3
                              25.47 Kitem/s │ 19.46 Kitem/s │ 22.34 Kitem/s │ 22.15 Kitem/s │         │
";

    #[test]
    fn paired_rows_are_parsed_with_their_titles_and_targets() {
        let rows = parse_paired(PAIRED);
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[0],
            PairedRow {
                title: "threads, CartPole x64, step".into(),
                pool_ns: 18669.0,
                baseline_ns: 7741.0,
                q1_ns: 6147.0,
                median_ns: 10928.0,
                q3_ns: 29706.0,
                target: "issue 3: <= 250 ns".into(),
                pairs: 8,
            }
        );
        assert_eq!(rows[1].target, "");
        assert_eq!(rows[2].q1_ns, -6490.0);
        assert_eq!(rows[3].title, "procs shm (2), CartPole x32, step");
        assert_eq!(rows[3].median_ns, 226951.0);
    }

    #[test]
    fn divan_medians_are_keyed_by_path() {
        let medians = parse_divan(DIVAN);
        let at = |p: &[&str]| divan_median(&medians, p).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        assert!(close(at(&["latency_50us", "raw", "8"]), 451_500.0));
        assert!(close(
            at(&["latency_50us", "sync_step", "8", "threads"]),
            358_000.0
        ));
        assert!(close(
            at(&["cartpole", "sync_step", "32", "procs_queue"]),
            2_742_000.0
        ));
        // A name that is a prefix of another's is its own benchmark.
        assert!(close(
            at(&["latency_50us", "sync_step", "8", "procs_shm"]),
            368_600.0
        ));
        assert!(divan_median(&medians, &["latency_50us", "raw", "2"]).is_err());
    }

    #[test]
    fn the_tables_carry_every_row() {
        let table = tables(&parse_paired(PAIRED), &parse_divan(DIVAN)).unwrap();
        assert!(table.contains("| threads, CartPole x64, step | 10928 ns (6147 .. 29706; 8 pairs) | 18669 / 7741 ns | issue 3: <= 250 ns |"));
        assert!(table.contains("step: speed-up over one thread | 1.26x | issue 3: >= 1.8x |"));
        assert!(
            table.contains("| procs (2), CartPole x32, step: shm throughput over queue | 5.3x |")
        );
        assert!(tables(&[], &parse_divan(DIVAN)).is_err());
    }

    #[test]
    fn splice_replaces_only_the_block() {
        let text = format!("head\n{BEGIN}\nold\n{END}\ntail\n");
        let new = splice(&text, "new\n").unwrap();
        assert_eq!(new, format!("head\n{BEGIN}\nnew\n{END}\ntail\n"));
        assert!(splice("no markers", "x").is_err());
    }

    #[test]
    fn the_performance_page_has_the_markers() {
        let text = std::fs::read_to_string(root().join("docs").join("performance.md")).unwrap();
        splice(&text, "").unwrap();
    }
}
