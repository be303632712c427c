//! Fuzz target `store_file`: a store file holding every domain, with mutated bytes, opened and read through every listing: typed errors only, no panic, no hang (the checks are in `fuzz/harness/store_file.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/store_file.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
