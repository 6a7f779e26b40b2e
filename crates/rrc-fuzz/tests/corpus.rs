//! Replays every input kept in the repository for every fuzz target:
//! `fuzz/corpus/<target>/` (the coverage-minimised corpus) and
//! `fuzz/regressions/<target>/` (inputs that once crashed, ran out of
//! memory or time). A target must have a non-empty corpus: no silent skip.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir` (none if it does not exist), sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.map(|e| e.expect("listing a corpus directory").path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

#[test]
fn every_target_replays_its_corpus_and_regressions() {
    let mut failures = Vec::new();
    for (name, target) in rrc_fuzz::TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        if corpus.is_empty() {
            failures.push(format!("{name}: fuzz/corpus/{name}/ is missing or empty (scripts/fuzz.sh {name} makes one)"));
        }
        let regressions = inputs(&fuzz_dir().join("regressions").join(name));
        for p in corpus.iter().chain(&regressions) {
            let data = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            if let Err(e) = std::panic::catch_unwind(|| target(&data)) {
                let why = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                failures.push(format!("{name}: {}: {why}", p.display()));
            }
        }
        println!("{name}: {} corpus inputs, {} regressions replayed", corpus.len(), regressions.len());
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
