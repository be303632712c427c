//! The `payload_schema` fuzz harness: the process registry's payload validator
//! (`src/process/json_schema.rs`, reached through `spindle::fuzzing`) against `boon`, a JSON Schema
//! validator (draft 2020-12), on the keywords ours supports: the same verdict for every schema
//! ours accepts, and the step bound holds.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/payload_schema.rs`) and by the test that
//! replays the seed corpus on stable (`tests/fuzz_corpus.rs`), so it uses only `spindle`,
//! `serde_json`, `boon` and std. [`run`] panics when an invariant is violated.
//!
//! Input: the first byte chooses the form. Even: JSON text, the schema before the first NUL
//! and the value after it (`null` without a NUL). Odd: bytes that drive a generator of a
//! schema made of the supported keywords only (every one of them, nested, with small numbers,
//! counts given as `2` or `2.0`, strings of one- to three-byte characters) and of a value.
//!
//! Checks, for a schema that `check_schema` accepts (a generated one must be accepted):
//! - the verdict of `validate_within` with no bound is `Ok` or a mismatch, and equals `boon`'s
//!   (`boon` compiles every accepted schema once annotations are dropped and the names listed
//!   by `required` and `type` are made unique, which changes no verdict). Skipped when a number
//!   is an integer past 2^53, which `boon` compares as a float;
//! - the step bound: every validation takes at most one step per schema node per value node,
//!   so with that many steps the verdict is the same; with none it is `TooMuchWork`; with any
//!   number in between it is the same verdict or `TooMuchWork`, never another one.
//!
//! A schema that `check_schema` refuses is still validated (bounded) for panics.

use serde_json::{Map, Value, json};
use spindle::fuzzing::{SchemaRefusal, check_schema, validate_within};

/// Annotation keywords: ours accepts any value and ignores them; `boon` reads some (`$schema`,
/// `$id`, `format`) and checks the values of others against its meta-schema.
const ANNOTATIONS: [&str; 11] = [
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "format",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The largest integer magnitude a float holds exactly.
const EXACT_MAX: u64 = 1 << 53;

/// Property names the generator uses for schemas and values alike, so that they meet.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// Strings the generator uses (characters of one, two and three bytes).
const STRINGS: [&str; 6] = ["", "a", "ab", "é", "日本", "abc"];

/// Most levels of a generated schema or value.
const GENERATED_DEPTH: usize = 4;

/// Runs one input; panics if the verdicts differ or the step bound breaks.
pub fn run(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else { return };
    let (schema, value, generated) = if form.is_multiple_of(2) {
        let Some((schema, value)) = from_text(rest) else { return };
        (schema, value, false)
    } else {
        let mut bytes = Bytes { data: rest, at: 0 };
        let schema = gen_schema(&mut bytes, 1);
        let value = gen_value(&mut bytes, 1);
        (schema, value, true)
    };
    let budget_byte = data.last().copied().unwrap_or(0);
    match check_schema(&schema) {
        Ok(()) => check(&schema, &value, budget_byte),
        Err(why) => {
            assert!(!generated, "a generated schema was refused: {why}; schema {schema}");
            let _ = validate_within(&schema, &value, 10_000);
        }
    }
}

/// The schema and value of a text input, when both are JSON.
fn from_text(rest: &[u8]) -> Option<(Value, Value)> {
    let (schema, value) = match rest.iter().position(|&byte| byte == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &b"null"[..]),
    };
    Some((serde_json::from_slice(schema).ok()?, serde_json::from_slice(value).ok()?))
}

/// The checks for an accepted schema.
fn check(schema: &Value, value: &Value, budget_byte: u8) {
    let verdict = validate_within(schema, value, u64::MAX);
    let (Ok(()) | Err(SchemaRefusal::Mismatch(_))) = verdict else {
        panic!("unbounded validation ran out of steps; schema {schema}, value {value}");
    };
    let bound = (nodes(schema) * nodes(value)) as u64;
    let at_bound = validate_within(schema, value, bound);
    assert_eq!(at_bound, verdict, "{bound} steps changed the verdict; {schema}, {value}");
    let none = validate_within(schema, value, 0);
    assert_eq!(none, Err(SchemaRefusal::TooMuchWork), "no steps; {schema}, {value}");
    let some = u64::from(budget_byte) % bound.max(1);
    let within = validate_within(schema, value, some);
    assert!(
        within == verdict || within == Err(SchemaRefusal::TooMuchWork),
        "{some} steps gave {within:?}, unbounded {verdict:?}; schema {schema}, value {value}"
    );
    if exact(schema) && exact(value) {
        let theirs = boon_verdict(schema, value);
        assert_eq!(
            verdict.is_ok(),
            theirs,
            "ours {verdict:?}, boon's {theirs}; schema {schema}, value {value}"
        );
    }
}

/// Whether `boon` accepts `value` under `schema` (normalised; see the module's header).
fn boon_verdict(schema: &Value, value: &Value) -> bool {
    let normal = normalise(schema);
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    let location = "urn:spindle:fuzz";
    compiler.add_resource(location, normal.clone()).expect("boon takes the schema");
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(location, &mut schemas)
        .unwrap_or_else(|error| panic!("boon refused an accepted schema {normal}: {error}"));
    schemas.validate(value, index).is_ok()
}

/// The schema without annotations, with `required` and `type` lists made unique.
fn normalise(schema: &Value) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (keyword, arg) in map {
        let arg = match keyword.as_str() {
            _ if ANNOTATIONS.contains(&keyword.as_str()) => continue,
            "not" | "items" | "additionalProperties" => normalise(arg),
            "anyOf" | "oneOf" | "allOf" => {
                Value::Array(arg.as_array().into_iter().flatten().map(normalise).collect())
            }
            "properties" => Value::Object(
                arg.as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, schema)| (name.clone(), normalise(schema)))
                    .collect(),
            ),
            "required" | "type" => unique(arg),
            _ => arg.clone(),
        };
        out.insert(keyword.clone(), arg);
    }
    Value::Object(out)
}

/// An array without repeated items (first kept); anything else as it is.
fn unique(arg: &Value) -> Value {
    let Value::Array(items) = arg else { return arg.clone() };
    let mut kept: Vec<Value> = Vec::new();
    for item in items {
        if !kept.contains(item) {
            kept.push(item.clone());
        }
    }
    Value::Array(kept)
}

/// How many JSON values `value` holds, itself included.
fn nodes(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nodes).sum::<usize>(),
        Value::Object(members) => 1 + members.values().map(nodes).sum::<usize>(),
        _ => 1,
    }
}

/// Whether every integer in `value` is at most 2^53 in magnitude (exact as a float).
fn exact(value: &Value) -> bool {
    match value {
        Value::Number(number) => match (number.as_u64(), number.as_i64()) {
            (Some(whole), _) => whole <= EXACT_MAX,
            (None, Some(whole)) => whole.unsigned_abs() <= EXACT_MAX,
            (None, None) => true,
        },
        Value::Array(items) => items.iter().all(exact),
        Value::Object(members) => members.values().all(exact),
        _ => true,
    }
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

/// A small number: an integer in -3..=3 (sometimes written as a float), or a half.
fn gen_number(bytes: &mut Bytes<'_>) -> Value {
    let byte = bytes.byte();
    let whole = i64::from(byte % 7) - 3;
    match byte / 7 % 4 {
        0 | 1 => json!(whole),
        2 => json!(whole as f64),
        _ => json!(whole as f64 + 0.5),
    }
}

/// A value of at most [`GENERATED_DEPTH`] levels.
fn gen_value(bytes: &mut Bytes<'_>, depth: usize) -> Value {
    let kinds = if depth >= GENERATED_DEPTH || bytes.done() { 5 } else { 7 };
    match bytes.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(bytes.byte() % 2 == 1),
        2 | 3 => gen_number(bytes),
        4 => json!(STRINGS[bytes.below(STRINGS.len())]),
        5 => Value::Array((0..bytes.below(4)).map(|_| gen_value(bytes, depth + 1)).collect()),
        _ => {
            let mut members = Map::new();
            for _ in 0..bytes.below(4) {
                let name = NAMES[bytes.below(NAMES.len())];
                members.insert(name.to_owned(), gen_value(bytes, depth + 1));
            }
            Value::Object(members)
        }
    }
}

/// A schema of the supported keywords, at most [`GENERATED_DEPTH`] levels.
fn gen_schema(bytes: &mut Bytes<'_>, depth: usize) -> Value {
    let byte = bytes.byte();
    if byte.is_multiple_of(8) {
        return Value::Bool(byte.is_multiple_of(16));
    }
    let mut map = Map::new();
    for _ in 0..1 + bytes.below(3) {
        let (keyword, arg) = gen_keyword(bytes, depth);
        map.insert(keyword.to_owned(), arg);
    }
    Value::Object(map)
}

/// One keyword and its value; keywords that hold schemas only above the depth bound.
fn gen_keyword(bytes: &mut Bytes<'_>, depth: usize) -> (&'static str, Value) {
    let nested = depth < GENERATED_DEPTH;
    let choice = bytes.below(if nested { 24 } else { 15 });
    match choice {
        0 | 1 => ("type", gen_type(bytes)),
        2 => ("enum", Value::Array((0..bytes.below(4)).map(|_| gen_value(bytes, 3)).collect())),
        3 => ("const", gen_value(bytes, 3)),
        4 => ("required", gen_names(bytes)),
        5 => ("uniqueItems", Value::Bool(bytes.byte() % 2 == 1)),
        6..=9 => {
            let keyword = ["minItems", "maxItems", "minLength", "maxLength"][choice - 6];
            let count = bytes.byte();
            let count = if count >= 128 { json!(f64::from(count % 4)) } else { json!(count % 4) };
            (keyword, count)
        }
        10..=13 => {
            let keyword = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
            (keyword[choice - 10], gen_number(bytes))
        }
        14 => ("title", json!(bytes.byte())),
        15..=17 => {
            let keyword = ["anyOf", "oneOf", "allOf"][choice - 15];
            let schemas = (0..1 + bytes.below(3)).map(|_| gen_schema(bytes, depth + 1)).collect();
            (keyword, Value::Array(schemas))
        }
        18 => ("not", gen_schema(bytes, depth + 1)),
        19 | 20 => ("items", gen_schema(bytes, depth + 1)),
        21 => ("additionalProperties", gen_schema(bytes, depth + 1)),
        _ => {
            let mut properties = Map::new();
            for _ in 0..bytes.below(4) {
                let name = NAMES[bytes.below(NAMES.len())];
                properties.insert(name.to_owned(), gen_schema(bytes, depth + 1));
            }
            ("properties", Value::Object(properties))
        }
    }
}

/// A `type` value: one name or a list of one to three (repeats possible).
fn gen_type(bytes: &mut Bytes<'_>) -> Value {
    const TYPES: [&str; 7] = ["null", "boolean", "object", "array", "number", "integer", "string"];
    let byte = bytes.byte();
    if byte.is_multiple_of(2) {
        return json!(TYPES[usize::from(byte / 2) % TYPES.len()]);
    }
    Value::Array((0..1 + bytes.below(3)).map(|_| json!(TYPES[bytes.below(TYPES.len())])).collect())
}

/// A `required` value: zero to three names (repeats possible).
fn gen_names(bytes: &mut Bytes<'_>) -> Value {
    Value::Array((0..bytes.below(4)).map(|_| json!(NAMES[bytes.below(NAMES.len())])).collect())
}
