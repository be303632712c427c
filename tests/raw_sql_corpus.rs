//! Replays the seed corpus of the `raw_sql` fuzz target (`fuzz/corpus/raw_sql/`) through the
//! same harness the fuzzer runs (`fuzz/harness/raw_sql.rs`), so that stable CI checks every
//! seed: arbitrary SQL in a transaction closure never costs an acknowledged write, never
//! half-commits, and never lets a token's view read another tenant's data. A finding of the
//! fuzzer becomes a seed here once fixed.

mod common;
#[path = "../fuzz/harness/raw_sql.rs"]
mod harness;

use std::path::PathBuf;

fn replay(files: &[PathBuf]) {
    for file in files {
        let data = std::fs::read(file).expect("an input file");
        eprintln!("replaying {}", file.display());
        harness::run(&data);
    }
}

#[test]
fn every_seed_of_the_raw_sql_corpus_keeps_every_acknowledged_write() {
    let files = common::files_in("fuzz/corpus/raw_sql");
    assert!(files.len() >= 20, "only {} seeds in the raw_sql corpus", files.len());
    replay(&files);
}
