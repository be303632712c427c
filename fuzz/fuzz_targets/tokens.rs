//! Fuzz target `tokens`: arbitrary and mutated secrets into Store::authenticate: Ok only for a live issued secret (the checks are in `fuzz/harness/tokens.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/tokens.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
