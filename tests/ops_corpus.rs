//! Replays the seed corpus of the `ops` fuzz target (`fuzz/corpus/ops/`) through the same
//! harness the fuzzer runs (`fuzz/harness/ops.rs`), so that stable CI checks every seed: an
//! arbitrary sequence of public operations over every domain, with clock moves (backwards
//! too), rolled-back transaction closures and reopens, agrees with the plain-Rust models of
//! `tests/models/` after every step and keeps the invariants (dense sequences, growing fences,
//! nothing completed twice, graphs audited clean, nothing written by a refused call). A
//! finding of the fuzzer becomes a seed here once fixed.

mod common;
#[path = "../fuzz/harness/ops.rs"]
mod harness;

/// The committed seeds, then (with `SPINDLE_OPS_DIR=<dir>`) every file of another directory,
/// such as a fuzzer's scratch corpus or its findings.
#[test]
fn every_seed_of_the_ops_corpus_agrees_with_the_models() {
    let mut files = common::files_in("fuzz/corpus/ops");
    assert!(files.len() >= 10, "only {} seeds in the ops corpus", files.len());
    if let Ok(extra) = std::env::var("SPINDLE_OPS_DIR") {
        files.extend(common::files_in(&extra));
    }
    for file in &files {
        let data = std::fs::read(file).expect("an input file");
        eprintln!("replaying {}", file.display());
        harness::run(&data);
    }
}
