//! Replays the committed corpus of every fuzz target through the target's
//! function (no fuzzer needed), and checks that the seeds in it are those
//! the encoders make today.
#![forbid(unsafe_code)]
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every file of `corpus/<target>/`, by name.
fn files(target: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = corpus().join(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    entries
        .map(|entry| {
            let path = entry.expect("a corpus entry").path();
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, bytes)
        })
        .collect()
}

#[test]
fn every_corpus_file_replays_through_its_target() {
    let mut folders: Vec<String> = fs::read_dir(corpus())
        .expect("fuzz/corpus")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    folders.sort();
    let mut names: Vec<&str> = fuzz::TARGETS.iter().map(|t| t.name).collect();
    names.sort();
    assert_eq!(folders, names, "one corpus folder per target");
    for target in fuzz::TARGETS {
        let files = files(target.name);
        assert!(!files.is_empty(), "the corpus of {} is empty", target.name);
        for (name, bytes) in files {
            eprintln!("{}/{name}", target.name);
            (target.run)(&bytes);
        }
    }
}

#[test]
fn the_corpus_holds_the_current_seeds() {
    for seed in fuzz::seeds() {
        let path = corpus().join(seed.target).join(&seed.name);
        let committed = fs::read(&path).unwrap_or_default();
        assert!(
            committed == seed.bytes,
            "{} is missing or stale: run `cargo run -p fuzz --example write_seeds`",
            path.display()
        );
    }
}

#[test]
fn seeds_decode() {
    // A seed that a target's decoder refuses would seed nothing useful.
    for seed in fuzz::seeds() {
        let ok = match seed.target {
            "tensordict" => tensordict::decode(&seed.bytes).is_ok(),
            "spec" => specs::TensorSpec::decode(&seed.bytes).is_ok(),
            "env_specs" => envs::EnvSpecs::from_bytes(&seed.bytes).is_ok(),
            "kwargs" => envs::Kwargs::from_bytes(&seed.bytes).is_ok(),
            "schema" => exchange::Schema::decode(&seed.bytes).is_ok(),
            "to_worker" => pool_proc::fuzzing::to_worker(&seed.bytes).is_some(),
            "from_worker" => pool_proc::fuzzing::from_worker(&seed.bytes).is_some(),
            "frames" => pool_proc::fuzzing::read_frames(&seed.bytes).1.is_none(),
            other => panic!("a seed of an unknown target {other}"),
        };
        assert!(ok, "{}/{} does not decode", seed.target, seed.name);
    }
}
