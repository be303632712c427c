//! Fuzz target: arbitrary SQL through `Tx::sql()` in a transaction closure must never cost an
//! acknowledged write (the checks are in `fuzz/harness/raw_sql.rs`, shared with
//! `tests/raw_sql_corpus.rs`, which replays the seed corpus on stable).

#![no_main]

#[path = "../harness/raw_sql.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
