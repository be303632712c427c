//! Replays the seed corpus of the `ops` fuzz target (`fuzz/corpus/ops/`) through the same
//! harness the fuzzer runs (`fuzz/harness/ops.rs`), so that stable CI checks every seed: an
//! arbitrary sequence of public operations over every domain, with clock moves (backwards
//! too), rolled-back transaction closures and reopens, agrees with the plain-Rust models of
//! `tests/models/` after every step and keeps the invariants (dense sequences, growing fences,
//! nothing completed twice, graphs audited clean, nothing written by a refused call). A
//! finding of the fuzzer becomes a seed here once fixed.

#[path = "../fuzz/harness/ops.rs"]
mod harness;

use std::path::{Path, PathBuf};

/// The files of `dir` (relative to the crate's root, or absolute), sorted.
fn inputs(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// The committed seeds, then (with `SPINDLE_OPS_DIR=<dir>`) every file of another directory,
/// such as a fuzzer's scratch corpus or its findings.
#[test]
fn every_seed_of_the_ops_corpus_agrees_with_the_models() {
    let mut files = inputs("fuzz/corpus/ops");
    assert!(files.len() >= 10, "only {} seeds in the ops corpus", files.len());
    if let Ok(extra) = std::env::var("SPINDLE_OPS_DIR") {
        files.extend(inputs(&extra));
    }
    for file in &files {
        let data = std::fs::read(file).expect("an input file");
        eprintln!("replaying {}", file.display());
        harness::run(&data);
    }
}
