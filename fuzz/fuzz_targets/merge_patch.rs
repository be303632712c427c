//! Fuzz target `merge_patch`: the workflows' JSON Merge Patch against the json-patch crate and RFC 7396's rules (the checks are in `fuzz/harness/merge_patch.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/merge_patch.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
