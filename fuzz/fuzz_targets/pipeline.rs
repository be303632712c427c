//! Fuzz target `pipeline`: arbitrary bytes into the CLI's pipeline reader and validator: no panic, and an accepted file builds a graph with exactly its nodes and edges (the checks are in `fuzz/harness/pipeline.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/pipeline.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
