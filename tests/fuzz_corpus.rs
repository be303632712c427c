//! Replays the seed corpora of the fuzz targets `pipeline`, `payload_schema`, `merge_patch`,
//! `store_file` and `tokens` (`fuzz/corpus/<target>/`) through the same harnesses the fuzzer
//! runs (`fuzz/harness/<target>.rs`), so that stable CI checks every seed without nightly. A
//! finding of the fuzzer becomes a seed here once fixed. (`raw_sql` has its own file,
//! `tests/raw_sql_corpus.rs`.)
//!
//! The harnesses reach crate-private code through `spindle::fuzzing`, which the crate's
//! dev-dependency on itself turns on for every test build.

#[path = "../fuzz/harness/merge_patch.rs"]
mod merge_patch;
/// The names of a run's things, which the CLI's `pipeline/format.rs` (in the `pipeline`
/// harness) names as `crate::names`.
#[allow(dead_code)]
#[path = "../cli/src/names.rs"]
mod names;
#[path = "../fuzz/harness/payload_schema.rs"]
mod payload_schema;
#[path = "../fuzz/harness/pipeline.rs"]
mod pipeline;
#[path = "../fuzz/harness/store_file.rs"]
mod store_file;
#[path = "../fuzz/harness/tokens.rs"]
mod tokens;

mod common;

use std::path::{Path, PathBuf};

/// The files of `fuzz/corpus/<target>`, sorted; panics unless there are at least `min`.
fn seeds(target: &str, min: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let files = common::files_in(Path::new("fuzz/corpus").join(target));
    assert!(files.len() >= min, "only {} seeds in the {target} corpus", files.len());
    files
        .into_iter()
        .map(|file| {
            let data = std::fs::read(&file).expect("a seed file");
            (file, data)
        })
        .collect()
}

/// Runs every seed of `target` through `run`.
fn replay(target: &str, min: usize, run: fn(&[u8])) {
    for (file, data) in seeds(target, min) {
        eprintln!("replaying {}", file.display());
        run(&data);
    }
}

#[test]
fn every_pipeline_seed_is_refused_or_builds_exactly_its_graph() {
    replay("pipeline", 20, pipeline::run);
}

#[test]
fn every_payload_schema_seed_gets_boons_verdict_within_the_step_bound() {
    replay("payload_schema", 20, payload_schema::run);
}

#[test]
fn every_merge_patch_seed_matches_json_patch_and_rfc_7396() {
    replay("merge_patch", 20, merge_patch::run);
}

#[test]
fn every_tokens_seed_opens_only_what_a_live_issued_token_opens() {
    replay("tokens", 20, tokens::run);
}

#[test]
fn every_store_file_seed_ends_in_values_or_typed_errors() {
    let mut opened = 0;
    let mut refused_as_damaged = 0;
    for (file, data) in seeds("store_file", 15) {
        eprintln!("replaying {}", file.display());
        let outcome = store_file::outcome(&data);
        eprintln!("  {outcome:?}");
        opened += usize::from(outcome.opened && outcome.errors.is_empty());
        let damaged = matches!(outcome.refused.as_deref(), Some("Corrupt" | "NotADatabase"));
        refused_as_damaged += usize::from(damaged);
    }
    assert!(opened >= 3, "only {opened} seeds opened and read cleanly");
    assert!(refused_as_damaged >= 3, "only {refused_as_damaged} seeds were refused as damaged");
    // `run` is what the fuzz target calls: the same checks, the outcome dropped.
    store_file::run(&[]);
}
