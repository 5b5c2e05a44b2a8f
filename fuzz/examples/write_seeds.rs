//! Writes the seeds of every fuzz target ([`fuzz::seeds`]) into
//! `fuzz/corpus/<target>/`, replacing the `seed-*` files there (other
//! files, such as regression inputs, stay).
#![forbid(unsafe_code)]
use std::fs;
use std::path::Path;

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in fuzz::TARGETS {
        let dir = corpus.join(target.name);
        fs::create_dir_all(&dir)?;
        for file in fs::read_dir(&dir)? {
            let path = file?.path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
            {
                fs::remove_file(path)?;
            }
        }
    }
    let seeds = fuzz::seeds();
    for seed in &seeds {
        fs::write(corpus.join(seed.target).join(&seed.name), &seed.bytes)?;
    }
    println!("wrote {} seeds under {}", seeds.len(), corpus.display());
    Ok(())
}
