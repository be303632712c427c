//! Fuzz target `payload_schema`: the process registry's payload validator against the boon JSON Schema crate: same verdict, and the step bound holds (the checks are in `fuzz/harness/payload_schema.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/payload_schema.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
