//! Crate-private functions for the fuzz harnesses (`fuzz/harness/`) and the tests that replay
//! their corpora (`tests/fuzz_corpus.rs`): the process registry's payload validator and the
//! workflows' JSON Merge Patch, which no public operation reaches without a store around it.
//!
//! Only with the `fuzz` feature, hidden from the documentation, and not a stable API. The
//! functions are thin wrappers over the very source files the store runs
//! (`process/json_schema.rs`, `workflow/patch.rs`), compiled here a second time because their
//! modules are private to their domains.

use serde_json::Value;

// The second copies are deliberate (see the header): `clippy::duplicate_mod` is allowed on them.
#[allow(clippy::duplicate_mod)]
#[path = "process/json_schema.rs"]
mod json_schema;

#[allow(clippy::duplicate_mod)]
#[path = "workflow/patch.rs"]
mod patch;

/// Why [`validate_within`] refused a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaRefusal {
    /// The value does not meet the schema: where and why.
    Mismatch(String),
    /// Deciding took more than the steps allowed.
    TooMuchWork,
}

/// Whether the payload validator accepts `schema` (what registration checks); `Err` says why
/// not.
///
/// # Errors
/// The reason the schema is refused: an unsupported keyword, a malformed keyword value, or
/// nesting past the bound.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    json_schema::check_schema(schema)
}

/// Checks `value` against `schema` (one that [`check_schema`] accepts) in at most `steps_max`
/// steps, one per schema applied to one place of the value.
///
/// # Errors
/// [`SchemaRefusal::Mismatch`] for a value the schema refuses, [`SchemaRefusal::TooMuchWork`]
/// when the steps ran out first.
pub fn validate_within(schema: &Value, value: &Value, steps_max: u64) -> Result<(), SchemaRefusal> {
    json_schema::validate_within(schema, value, steps_max).map_err(|refusal| match refusal {
        json_schema::Refusal::Mismatch(why) => SchemaRefusal::Mismatch(why),
        json_schema::Refusal::TooMuchWork => SchemaRefusal::TooMuchWork,
    })
}

/// Applies the JSON Merge Patch (RFC 7396) `patch` to `target`, as `patch_state` does.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    patch::merge_patch(target, patch);
}
