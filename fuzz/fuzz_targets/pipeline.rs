//! Fuzz target `pipeline`: arbitrary bytes into the CLI's pipeline reader and validator: no panic, and an accepted file builds a graph with exactly its nodes and edges (the checks are in `fuzz/harness/pipeline.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/pipeline.rs"]
mod harness;
/// The names of a run's things, which the CLI's `pipeline/format.rs` names as `crate::names`.
#[allow(dead_code)]
#[path = "../../cli/src/names.rs"]
mod names;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
