//! The `merge_patch` fuzz harness: the workflows' JSON Merge Patch (`src/workflow/patch.rs`,
//! what `patch_state` applies, reached through `spindle::fuzzing`) against the `json-patch`
//! crate's `merge`, and RFC 7396's rules.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/merge_patch.rs`) and by the test that
//! replays the seed corpus on stable (`tests/fuzz_corpus.rs`), so it uses only `spindle`,
//! `serde_json`, `json-patch` and std. [`run`] panics when an invariant is violated.
//!
//! Input: the first byte chooses the form. Even: JSON text, the target before the first NUL
//! and the patch after it (`{}` without a NUL). Odd: bytes that drive a generator of a target
//! and a patch over few names, so that they meet (nulls, objects, arrays and scalars nested).
//!
//! Checks, for a target `t` and a patch `p`:
//! - ours gives what `json_patch::merge` gives;
//! - RFC 7396 member by member: a patch that is not an object replaces the target; an object
//!   patch gives an object in which each `null` member of the patch is absent, each other
//!   member is the member of the target patched by it (recursively, an absent one read as
//!   `null`), and every name the patch does not mention keeps the target's value (none, for a
//!   target that was not an object), so no `null` of the patch's object members survives;
//! - applying the same patch twice gives what applying it once does;
//! - `{}` leaves an object target as it is.

use serde_json::{Map, Value, json};
use spindle::fuzzing::merge_patch;

/// Names the generator uses in targets and patches alike.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// Most levels of a generated value.
const GENERATED_DEPTH: usize = 5;

/// Runs one input; panics if the result differs from the reference or breaks a rule.
pub fn run(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else { return };
    let (target, patch) = if form.is_multiple_of(2) {
        let Some(pair) = from_text(rest) else { return };
        pair
    } else {
        let mut bytes = Bytes { data: rest, at: 0 };
        (gen_value(&mut bytes, 1), gen_value(&mut bytes, 1))
    };
    let mut ours = target.clone();
    merge_patch(&mut ours, &patch);
    let mut theirs = target.clone();
    json_patch::merge(&mut theirs, &patch);
    assert_eq!(ours, theirs, "ours differs from json-patch; target {target}, patch {patch}");
    check_rules(Some(&target), &patch, &ours, &target, &patch);
    let mut twice = ours.clone();
    merge_patch(&mut twice, &patch);
    assert_eq!(twice, ours, "applying twice differs; target {target}, patch {patch}");
    if target.is_object() {
        let mut same = target.clone();
        merge_patch(&mut same, &json!({}));
        assert_eq!(same, target, "an empty patch changed {target}");
    }
}

/// The target and patch of a text input, when both are JSON.
fn from_text(rest: &[u8]) -> Option<(Value, Value)> {
    let (target, patch) = match rest.iter().position(|&byte| byte == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &b"{}"[..]),
    };
    Some((serde_json::from_slice(target).ok()?, serde_json::from_slice(patch).ok()?))
}

/// RFC 7396's rules for `result`, the patch `patch` applied to `target` (`None`: absent);
/// `whole_target` and `whole_patch` name the input in a failure.
fn check_rules(
    target: Option<&Value>,
    patch: &Value,
    result: &Value,
    whole_target: &Value,
    whole_patch: &Value,
) {
    let context = || format!("target {whole_target}, patch {whole_patch}");
    let Value::Object(members) = patch else {
        assert_eq!(result, patch, "a non-object patch must replace; {}", context());
        return;
    };
    let Value::Object(fields) = result else {
        panic!("an object patch gave {result}; {}", context());
    };
    for (name, member) in members {
        match (member, fields.get(name)) {
            (Value::Null, None) => {}
            (Value::Null, Some(kept)) => panic!("null kept {name:?} as {kept}; {}", context()),
            (_, None) => panic!("member {name:?} missing; {}", context()),
            (_, Some(field)) => {
                let before = target.and_then(|target| target.get(name));
                check_rules(before, member, field, whole_target, whole_patch);
            }
        }
    }
    let unmentioned = |name: &String| !members.contains_key(name);
    let kept: Map<String, Value> = fields
        .iter()
        .filter(|(name, _)| unmentioned(name))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let expected: Map<String, Value> = match target {
        Some(Value::Object(before)) => before
            .iter()
            .filter(|(name, _)| unmentioned(name))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        _ => Map::new(),
    };
    assert_eq!(kept, expected, "names the patch does not mention; {}", context());
}

/// The generator's input: bytes read in order, zeros once they run out.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        byte
    }

    /// A number below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// A value of at most [`GENERATED_DEPTH`] levels, objects the likeliest.
fn gen_value(bytes: &mut Bytes<'_>, depth: usize) -> Value {
    let kinds = if depth >= GENERATED_DEPTH || bytes.done() { 5 } else { 8 };
    match bytes.below(kinds) {
        0 | 1 => Value::Null,
        2 => Value::Bool(bytes.byte() % 2 == 1),
        3 => json!(bytes.byte() % 4),
        4 => json!(NAMES[bytes.below(NAMES.len())]),
        5 => Value::Array((0..bytes.below(3)).map(|_| gen_value(bytes, depth + 1)).collect()),
        _ => {
            let mut members = Map::new();
            for _ in 0..bytes.below(5) {
                let name = NAMES[bytes.below(NAMES.len())];
                members.insert(name.to_owned(), gen_value(bytes, depth + 1));
            }
            Value::Object(members)
        }
    }
}
