//! Fuzz target: an arbitrary sequence of public operations over every domain, with clock moves,
//! rolled-back closures and reopens, checked against the plain-Rust models after every step
//! (the decoder and the checks are in `fuzz/harness/ops.rs`, shared with `tests/ops_corpus.rs`,
//! which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/ops.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
