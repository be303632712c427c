//! The JSON Schema subset that a process's declared event types are checked against.
//!
//! A process declares a schema for the payload of each of its event types. [`check_schema`]
//! accepts or refuses the schema once, at registration; [`validate`] then checks each payload.
//! The subset is the validation vocabulary that needs no references and no regular
//! expressions: `type`, `enum`, `const`, `anyOf`, `oneOf`, `allOf`, `not`, `properties`,
//! `required`, `additionalProperties`, `items` (one schema for every element), `minItems`,
//! `maxItems`, `minLength`, `maxLength` (in chars), `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum` and `uniqueItems`. Annotation keywords (`title`, `description`, ...) are
//! accepted and ignored; every other keyword is refused, so a schema never silently means less
//! than its author wrote. Schemas nest at most [`MAX_DEPTH`] levels, which bounds recursion.
//! Numbers compare numerically throughout: `1` and `1.0` are equal, and `2.0` is an integer.

use std::cmp::Ordering;

use std::cell::Cell;

use serde_json::{Map, Number, Value};

/// Most schema levels on any path from the root schema (the root is level 1).
const MAX_DEPTH: usize = 32;

/// The names `type` may use.
const TYPE_NAMES: [&str; 7] = ["null", "boolean", "object", "array", "number", "integer", "string"];

/// Keywords accepted anywhere, with any value, and ignored.
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

/// Keywords that hold a count: a non-negative integer.
const COUNT_KEYWORDS: [&str; 4] = ["minItems", "maxItems", "minLength", "maxLength"];

/// Keywords that bound a number, with how a failure reads ("expected at least 3").
const NUMBER_BOUNDS: [(&str, &str); 4] = [
    ("minimum", "at least"),
    ("maximum", "at most"),
    ("exclusiveMinimum", "more than"),
    ("exclusiveMaximum", "less than"),
];

/// Keywords that hold a non-empty array of schemas.
const SCHEMA_LIST_KEYWORDS: [&str; 3] = ["anyOf", "oneOf", "allOf"];

/// The validation keywords not in one of the families above.
const OTHER_KEYWORDS: [&str; 9] = [
    "type",
    "enum",
    "const",
    "not",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "uniqueItems",
];

/// Checks that `schema` is a schema this validator understands (called once at registration).
pub(crate) fn check_schema(schema: &Value) -> Result<(), String> {
    check_at(schema, "", 1)
}

/// Checks `value` against `schema` (already accepted by [`check_schema`]); `Err` names the JSON pointer
/// of the first failing place and why, e.g. "/items/2: expected a string".
#[cfg(test)]
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    match validate_within(schema, value, u64::MAX) {
        Ok(()) => Ok(()),
        Err(Refusal::Mismatch(why)) => Err(why),
        Err(Refusal::TooMuchWork) => Err("too much work".to_owned()),
    }
}

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It does not meet the schema: the place and the reason.
    Mismatch(String),
    /// Deciding took more than the steps allowed (a schema applied to every item of a large
    /// payload, many times over through combinators).
    TooMuchWork,
}

/// Checks `value` against `schema` in at most `steps_max` steps (one step per schema applied
/// to one place of the value), so that one payload cannot keep the store busy for long.
pub(crate) fn validate_within(
    schema: &Value,
    value: &Value,
    steps_max: u64,
) -> Result<(), Refusal> {
    let budget = Budget { left: Cell::new(steps_max), exhausted: Cell::new(false) };
    let outcome = validate_at(schema, value, "", 1, &budget);
    if budget.exhausted.get() {
        return Err(Refusal::TooMuchWork);
    }
    outcome.map_err(Refusal::Mismatch)
}

/// The steps a validation may still take; running out ends it (its outcome is then unknown).
struct Budget {
    left: Cell<u64>,
    exhausted: Cell<bool>,
}

impl Budget {
    /// Takes one step; false once there are none left.
    fn take(&self) -> bool {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                true
            }
            None => {
                self.exhausted.set(true);
                false
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared readers of keyword values, used by both checking and validating.
// ---------------------------------------------------------------------------------------------

/// How a JSON pointer reads in a message: the empty pointer (the root) is spelled out.
fn place(pointer: &str) -> &str {
    if pointer.is_empty() { "(root)" } else { pointer }
}

/// The JSON pointer of member `token` under `pointer`, escaping `~` and `/` as RFC 6901 says.
fn child(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// The JSON pointer of element `index` under `pointer`.
fn child_index(pointer: &str, index: usize) -> String {
    format!("{pointer}/{index}")
}

/// The message for a keyword whose value is not of the kind the keyword needs.
fn bad_keyword(keyword: &str, pointer: &str, expected: &str) -> String {
    format!("schema keyword `{keyword}` at {} must be {expected}", place(pointer))
}

/// The type names a `type` value lists, or `None` if it is not a known name or a non-empty array
/// of known names.
fn type_names(arg: &Value) -> Option<Vec<&str>> {
    let names: Vec<&str> = match arg {
        Value::String(name) => vec![name.as_str()],
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(Value::as_str).collect::<Option<Vec<&str>>>()?
        }
        _ => return None,
    };
    names.iter().all(|name| TYPE_NAMES.contains(name)).then_some(names)
}

/// The strings a `required` value lists, or `None` if it is not an array of strings.
fn string_list(arg: &Value) -> Option<Vec<&str>> {
    arg.as_array()?.iter().map(Value::as_str).collect()
}

/// The schemas an `anyOf`/`oneOf`/`allOf` value lists, or `None` if it is not a non-empty array.
fn schema_list(arg: &Value) -> Option<&[Value]> {
    arg.as_array().map(Vec::as_slice).filter(|schemas| !schemas.is_empty())
}

/// A count keyword's value, or `None` if it is not a non-negative integer (`3.0` counts as 3).
fn as_count(arg: &Value) -> Option<u64> {
    match number_of(arg.as_number()?)? {
        Num::Int(whole) => u64::try_from(whole).ok(),
        Num::Float(_) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Checking a schema.
// ---------------------------------------------------------------------------------------------

/// Checks the schema found at `pointer`, `depth` levels below the root (the root is level 1).
fn check_at(schema: &Value, pointer: &str, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("schema nested deeper than {MAX_DEPTH} levels at {}", place(pointer)));
    }
    match schema {
        Value::Bool(_) => Ok(()),
        Value::Object(map) => {
            map.iter().try_for_each(|(keyword, arg)| check_keyword(keyword, arg, pointer, depth))
        }
        _ => Err(format!("schema at {} must be an object or a boolean", place(pointer))),
    }
}

/// Whether `keyword` is an annotation or a validation keyword this validator applies.
fn is_supported(keyword: &str) -> bool {
    ANNOTATIONS.contains(&keyword)
        || COUNT_KEYWORDS.contains(&keyword)
        || SCHEMA_LIST_KEYWORDS.contains(&keyword)
        || OTHER_KEYWORDS.contains(&keyword)
        || NUMBER_BOUNDS.iter().any(|(name, _)| *name == keyword)
}

/// Checks one keyword of the schema at `pointer` and, for keywords holding schemas, those.
fn check_keyword(keyword: &str, arg: &Value, pointer: &str, depth: usize) -> Result<(), String> {
    if !is_supported(keyword) {
        return Err(format!("unsupported schema keyword `{keyword}` at {}", place(pointer)));
    }
    let ok_if = |holds: bool, expected: &str| {
        if holds { Ok(()) } else { Err(bad_keyword(keyword, pointer, expected)) }
    };
    match keyword {
        _ if ANNOTATIONS.contains(&keyword) => Ok(()),
        "type" => ok_if(
            type_names(arg).is_some(),
            "a type name or a non-empty array of type names (null, boolean, object, array, \
             number, integer, string)",
        ),
        "enum" => ok_if(arg.is_array(), "an array"),
        "const" => Ok(()),
        "required" => ok_if(string_list(arg).is_some(), "an array of strings"),
        "uniqueItems" => ok_if(arg.is_boolean(), "a boolean"),
        "items" if arg.is_array() => {
            Err(bad_keyword(keyword, pointer, "one schema (the array form is not supported)"))
        }
        "not" | "items" | "additionalProperties" => {
            check_at(arg, &child(pointer, keyword), depth + 1)
        }
        "properties" => check_properties(arg, pointer, depth),
        _ if SCHEMA_LIST_KEYWORDS.contains(&keyword) => {
            check_schema_list(keyword, arg, pointer, depth)
        }
        _ if COUNT_KEYWORDS.contains(&keyword) => {
            ok_if(as_count(arg).is_some(), "a non-negative integer")
        }
        // What is left: the number bounds.
        _ => ok_if(arg.is_number(), "a number"),
    }
}

/// Checks a `properties` value: an object whose every member is a schema.
fn check_properties(arg: &Value, pointer: &str, depth: usize) -> Result<(), String> {
    let properties =
        arg.as_object().ok_or_else(|| bad_keyword("properties", pointer, "an object"))?;
    let here = child(pointer, "properties");
    properties
        .iter()
        .try_for_each(|(name, schema)| check_at(schema, &child(&here, name), depth + 1))
}

/// Checks an `anyOf`/`oneOf`/`allOf` value: a non-empty array of schemas.
fn check_schema_list(
    keyword: &str,
    arg: &Value,
    pointer: &str,
    depth: usize,
) -> Result<(), String> {
    let schemas = schema_list(arg)
        .ok_or_else(|| bad_keyword(keyword, pointer, "a non-empty array of schemas"))?;
    let here = child(pointer, keyword);
    schemas
        .iter()
        .enumerate()
        .try_for_each(|(index, schema)| check_at(schema, &child_index(&here, index), depth + 1))
}

// ---------------------------------------------------------------------------------------------
// Validating a value.
// ---------------------------------------------------------------------------------------------

/// Validates the value at `pointer` against a schema `depth` levels below the root schema.
fn validate_at(
    schema: &Value,
    value: &Value,
    pointer: &str,
    depth: usize,
    budget: &Budget,
) -> Result<(), String> {
    if !budget.take() {
        return Err(format!("{}: validation stopped: too much work", place(pointer)));
    }
    if depth > MAX_DEPTH {
        return Err(format!("{}: schema nested deeper than {MAX_DEPTH} levels", place(pointer)));
    }
    let map = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{}: no value is allowed here", place(pointer))),
        Value::Object(map) => map,
        _ => return Err(format!("{}: the schema is not an object or a boolean", place(pointer))),
    };
    refuse_unknown_keywords(map, pointer)?;
    validate_type(map, value, pointer)?;
    validate_enum_and_const(map, value, pointer)?;
    validate_number(map, value, pointer)?;
    validate_string(map, value, pointer)?;
    validate_array(map, value, pointer, depth, budget)?;
    validate_object(map, value, pointer, depth, budget)?;
    validate_combinators(map, value, pointer, depth, budget)
}

/// Refuses a schema with a keyword this validator does not apply (never one [`check_schema`] passed).
fn refuse_unknown_keywords(map: &Map<String, Value>, pointer: &str) -> Result<(), String> {
    match map.keys().find(|keyword| !is_supported(keyword)) {
        Some(keyword) => Err(format!("{}: unsupported schema keyword `{keyword}`", place(pointer))),
        None => Ok(()),
    }
}

/// Applies `type`.
fn validate_type(map: &Map<String, Value>, value: &Value, pointer: &str) -> Result<(), String> {
    let Some(arg) = map.get("type") else { return Ok(()) };
    let names = type_names(arg)
        .ok_or_else(|| bad_keyword("type", pointer, "a type name or an array of type names"))?;
    if names.iter().any(|name| has_type(value, name)) {
        return Ok(());
    }
    let wanted: Vec<&str> = names.iter().map(|name| type_phrase(name)).collect();
    Err(format!("{}: expected {}", place(pointer), wanted.join(" or ")))
}

/// Whether `value` is of the JSON Schema type `name` ("integer": a number with no fraction).
fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "number" => value.is_number(),
        "integer" => value.as_number().is_some_and(is_integer),
        "string" => value.is_string(),
        _ => false,
    }
}

/// How a type name reads after "expected".
fn type_phrase(name: &str) -> &str {
    match name {
        "null" => "null",
        "boolean" => "a boolean",
        "object" => "an object",
        "array" => "an array",
        "number" => "a number",
        "integer" => "an integer",
        "string" => "a string",
        _ => "an unknown type",
    }
}

/// Applies `enum` and `const`, comparing numbers numerically.
fn validate_enum_and_const(
    map: &Map<String, Value>,
    value: &Value,
    pointer: &str,
) -> Result<(), String> {
    if let Some(arg) = map.get("enum") {
        let allowed = arg.as_array().ok_or_else(|| bad_keyword("enum", pointer, "an array"))?;
        if !allowed.iter().any(|candidate| json_equal(candidate, value)) {
            return Err(format!("{}: expected one of the `enum` values", place(pointer)));
        }
    }
    match map.get("const") {
        Some(expected) if !json_equal(expected, value) => {
            Err(format!("{}: expected the `const` value", place(pointer)))
        }
        _ => Ok(()),
    }
}

/// Applies `minimum`, `maximum`, `exclusiveMinimum` and `exclusiveMaximum` to a number.
fn validate_number(map: &Map<String, Value>, value: &Value, pointer: &str) -> Result<(), String> {
    let Value::Number(number) = value else { return Ok(()) };
    for (keyword, phrase) in NUMBER_BOUNDS {
        let Some(arg) = map.get(keyword) else { continue };
        let bound = arg.as_number().ok_or_else(|| bad_keyword(keyword, pointer, "a number"))?;
        if !bound_holds(keyword, compare_numbers(number, bound)) {
            return Err(format!("{}: expected {phrase} {bound}", place(pointer)));
        }
    }
    Ok(())
}

/// Whether a number that compares to the bound as `order` satisfies the bound `keyword`.
fn bound_holds(keyword: &str, order: Ordering) -> bool {
    match keyword {
        "minimum" => order != Ordering::Less,
        "maximum" => order != Ordering::Greater,
        "exclusiveMinimum" => order == Ordering::Greater,
        "exclusiveMaximum" => order == Ordering::Less,
        _ => true,
    }
}

/// Applies `minLength` and `maxLength` to a string, counting chars.
fn validate_string(map: &Map<String, Value>, value: &Value, pointer: &str) -> Result<(), String> {
    let Value::String(text) = value else { return Ok(()) };
    let length = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
    validate_count(map, ("minLength", "maxLength"), length, "character", pointer)
}

/// Applies a (minimum, maximum) pair of count keywords to `count` things called `unit`.
fn validate_count(
    map: &Map<String, Value>,
    (min_keyword, max_keyword): (&str, &str),
    count: u64,
    unit: &str,
    pointer: &str,
) -> Result<(), String> {
    if let Some(min) = count_arg(map, min_keyword, pointer)?
        && count < min
    {
        return Err(format!("{}: expected at least {min} {}", place(pointer), plural(min, unit)));
    }
    if let Some(max) = count_arg(map, max_keyword, pointer)?
        && count > max
    {
        return Err(format!("{}: expected at most {max} {}", place(pointer), plural(max, unit)));
    }
    Ok(())
}

/// The value of count keyword `keyword`, if the schema has it.
fn count_arg(
    map: &Map<String, Value>,
    keyword: &str,
    pointer: &str,
) -> Result<Option<u64>, String> {
    map.get(keyword)
        .map(|arg| {
            as_count(arg).ok_or_else(|| bad_keyword(keyword, pointer, "a non-negative integer"))
        })
        .transpose()
}

/// `unit`, with an "s" unless `count` is 1.
fn plural(count: u64, unit: &str) -> String {
    if count == 1 { unit.to_owned() } else { format!("{unit}s") }
}

/// Applies `minItems`, `maxItems`, `uniqueItems` and `items` to an array.
fn validate_array(
    map: &Map<String, Value>,
    value: &Value,
    pointer: &str,
    depth: usize,
    budget: &Budget,
) -> Result<(), String> {
    let Value::Array(items) = value else { return Ok(()) };
    let count = u64::try_from(items.len()).unwrap_or(u64::MAX);
    validate_count(map, ("minItems", "maxItems"), count, "item", pointer)?;
    if let Some(arg) = map.get("uniqueItems") {
        let unique =
            arg.as_bool().ok_or_else(|| bad_keyword("uniqueItems", pointer, "a boolean"))?;
        if unique {
            validate_unique(items, pointer)?;
        }
    }
    let Some(schema) = map.get("items") else { return Ok(()) };
    items.iter().enumerate().try_for_each(|(index, item)| {
        validate_at(schema, item, &child_index(pointer, index), depth + 1, budget)
    })
}

/// Refuses an array with two equal items, naming the first item that repeats an earlier one.
fn validate_unique(items: &[Value], pointer: &str) -> Result<(), String> {
    let mut sorted: Vec<(usize, &Value)> = items.iter().enumerate().collect();
    // Stable, so equal items stay in index order and each adjacent equal pair is (earlier, later).
    sorted.sort_by(|(_, left), (_, right)| compare_json(left, right));
    let repeat = sorted
        .windows(2)
        .filter_map(|pair| match pair {
            [(first, left), (second, right)] if json_equal(left, right) => Some((*first, *second)),
            _ => None,
        })
        .min_by_key(|(_, second)| *second);
    match repeat {
        Some((first, second)) => Err(format!(
            "{}: expected unique items, but items {first} and {second} are equal",
            place(pointer)
        )),
        None => Ok(()),
    }
}

/// Applies `required`, `properties` and `additionalProperties` to an object.
fn validate_object(
    map: &Map<String, Value>,
    value: &Value,
    pointer: &str,
    depth: usize,
    budget: &Budget,
) -> Result<(), String> {
    let Value::Object(object) = value else { return Ok(()) };
    validate_required(map, object, pointer)?;
    let properties = map
        .get("properties")
        .map(|arg| arg.as_object().ok_or_else(|| bad_keyword("properties", pointer, "an object")))
        .transpose()?;
    let additional = map.get("additionalProperties");
    for (name, member) in object {
        let declared = properties.and_then(|properties| properties.get(name));
        match (declared, additional) {
            (None, Some(Value::Bool(false))) => {
                return Err(format!("{}: unexpected property `{name}`", place(pointer)));
            }
            (Some(schema), _) | (None, Some(schema)) => {
                validate_at(schema, member, &child(pointer, name), depth + 1, budget)?;
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// Applies `required`: every listed name must be a member of `object`.
fn validate_required(
    map: &Map<String, Value>,
    object: &Map<String, Value>,
    pointer: &str,
) -> Result<(), String> {
    let Some(arg) = map.get("required") else { return Ok(()) };
    let names =
        string_list(arg).ok_or_else(|| bad_keyword("required", pointer, "an array of strings"))?;
    match names.iter().find(|name| !object.contains_key(**name)) {
        Some(missing) => Err(format!("{}: missing required property `{missing}`", place(pointer))),
        None => Ok(()),
    }
}

/// Applies `allOf`, `anyOf`, `oneOf` and `not`.
fn validate_combinators(
    map: &Map<String, Value>,
    value: &Value,
    pointer: &str,
    depth: usize,
    budget: &Budget,
) -> Result<(), String> {
    let passes = |schema: &Value| validate_at(schema, value, pointer, depth + 1, budget).is_ok();
    if let Some(schemas) = schema_list_arg(map, "allOf", pointer)? {
        schemas
            .iter()
            .try_for_each(|schema| validate_at(schema, value, pointer, depth + 1, budget))?;
    }
    if let Some(schemas) = schema_list_arg(map, "anyOf", pointer)?
        && !schemas.iter().any(passes)
    {
        return Err(format!("{}: matches none of the `anyOf` schemas", place(pointer)));
    }
    if let Some(schemas) = schema_list_arg(map, "oneOf", pointer)? {
        // Two matches already decide the outcome, so the rest need not run.
        let matched: Vec<usize> = schemas
            .iter()
            .enumerate()
            .filter(|(_, schema)| passes(schema))
            .map(|(i, _)| i)
            .take(2)
            .collect();
        one_of_outcome(&matched, pointer)?;
    }
    match map.get("not") {
        Some(schema) if passes(schema) => {
            Err(format!("{}: matches the `not` schema", place(pointer)))
        }
        _ => Ok(()),
    }
}

/// The value of `anyOf`/`oneOf`/`allOf` keyword `keyword`, if the schema has it.
fn schema_list_arg<'a>(
    map: &'a Map<String, Value>,
    keyword: &str,
    pointer: &str,
) -> Result<Option<&'a [Value]>, String> {
    map.get(keyword)
        .map(|arg| {
            schema_list(arg)
                .ok_or_else(|| bad_keyword(keyword, pointer, "a non-empty array of schemas"))
        })
        .transpose()
}

/// Accepts a `oneOf` exactly when exactly one of its schemas matched (`indices` lists those).
fn one_of_outcome(indices: &[usize], pointer: &str) -> Result<(), String> {
    match indices {
        [_] => Ok(()),
        [] => Err(format!("{}: matches none of the `oneOf` schemas", place(pointer))),
        [first, second, ..] => Err(format!(
            "{}: matches more than one of the `oneOf` schemas ({first} and {second})",
            place(pointer)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing JSON values, numbers numerically.
// ---------------------------------------------------------------------------------------------

/// A JSON number in a form that compares exactly: integers as i128, the rest as f64.
#[derive(Debug, Clone, Copy)]
enum Num {
    /// A number `serde_json` holds as an integer.
    Int(i128),
    /// A finite number `serde_json` holds as a float.
    Float(f64),
}

/// The comparable form of `number`, or `None` if it has none (only with exotic `serde_json` features).
fn number_of(number: &Number) -> Option<Num> {
    if let Some(whole) = number.as_i64() {
        return Some(Num::Int(i128::from(whole)));
    }
    if let Some(whole) = number.as_u64() {
        return Some(Num::Int(i128::from(whole)));
    }
    let float = number.as_f64().filter(|float| float.is_finite())?;
    if float.fract() == 0.0 && float.abs() < 1e30 {
        // Exact: a whole float this small converts to i128 without loss.
        return Some(Num::Int(float as i128));
    }
    Some(Num::Float(float))
}

/// Whether `number` has no fractional part (2 and 2.0 do, 2.5 does not).
fn is_integer(number: &Number) -> bool {
    match number_of(number) {
        Some(Num::Int(_)) => true,
        Some(Num::Float(float)) => float.fract() == 0.0,
        None => false,
    }
}

/// Orders two JSON numbers by value; numbers without a comparable form sort last, by text.
fn compare_numbers(left: &Number, right: &Number) -> Ordering {
    match (number_of(left), number_of(right)) {
        (Some(left), Some(right)) => compare_num(left, right),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => left.to_string().cmp(&right.to_string()),
    }
}

/// Orders two comparable numbers exactly, integers against floats included.
fn compare_num(left: Num, right: Num) -> Ordering {
    match (left, right) {
        (Num::Int(left), Num::Int(right)) => left.cmp(&right),
        (Num::Float(left), Num::Float(right)) => left.total_cmp(&right),
        (Num::Int(left), Num::Float(right)) => compare_int_float(left, right),
        (Num::Float(left), Num::Int(right)) => compare_int_float(right, left).reverse(),
    }
}

/// Orders an integer against a finite float with a fraction or of magnitude 1e30 or more.
fn compare_int_float(whole: i128, float: f64) -> Ordering {
    const FAR: f64 = 1e30;
    if float >= FAR {
        return Ordering::Less;
    }
    if float <= -FAR {
        return Ordering::Greater;
    }
    // `float` has a fraction here, so it lies strictly between floor and floor + 1.
    let floor = float.floor() as i128;
    if whole <= floor { Ordering::Less } else { Ordering::Greater }
}

/// Whether two JSON values are equal, numbers compared numerically (1 equals 1.0).
fn json_equal(left: &Value, right: &Value) -> bool {
    compare_json(left, right) == Ordering::Equal
}

/// A total order on JSON values, `Equal` exactly when they are equal as JSON values. It walks
/// both values with an explicit stack, so no nesting depth can overflow the call stack.
fn compare_json(left: &Value, right: &Value) -> Ordering {
    let mut pending = vec![(left, right)];
    while let Some((left, right)) = pending.pop() {
        let order = compare_shallow(left, right, &mut pending);
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

/// Orders two values by kind and scalar content; for two equally long arrays or objects with the
/// same keys it answers `Equal` and pushes their members onto `pending`, first member on top.
fn compare_shallow<'a>(
    left: &'a Value,
    right: &'a Value,
    pending: &mut Vec<(&'a Value, &'a Value)>,
) -> Ordering {
    match (left, right) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Bool(left), Value::Bool(right)) => left.cmp(right),
        (Value::Number(left), Value::Number(right)) => compare_numbers(left, right),
        (Value::String(left), Value::String(right)) => left.cmp(right),
        (Value::Array(left), Value::Array(right)) => {
            let order = left.len().cmp(&right.len());
            if order == Ordering::Equal {
                pending.extend(left.iter().zip(right).rev());
            }
            order
        }
        (Value::Object(left), Value::Object(right)) => compare_objects(left, right, pending),
        _ => kind_rank(left).cmp(&kind_rank(right)),
    }
}

/// Orders two objects by their sorted key lists; if equal, pushes their members in key order.
fn compare_objects<'a>(
    left: &'a Map<String, Value>,
    right: &'a Map<String, Value>,
    pending: &mut Vec<(&'a Value, &'a Value)>,
) -> Ordering {
    let mut left_keys: Vec<&String> = left.keys().collect();
    let mut right_keys: Vec<&String> = right.keys().collect();
    left_keys.sort();
    right_keys.sort();
    let order = left_keys.cmp(&right_keys);
    if order == Ordering::Equal {
        let members =
            left_keys.iter().rev().filter_map(|key| Some((left.get(*key)?, right.get(*key)?)));
        pending.extend(members);
    }
    order
}

/// The rank of a value's kind in the order of [`compare_json`].
fn kind_rank(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Asserts that `value` passes `schema`, after asserting that the schema is accepted.
    fn accepts(schema: Value, value: Value) {
        assert_eq!(check_schema(&schema), Ok(()), "schema {schema}");
        assert_eq!(validate(&schema, &value), Ok(()), "schema {schema}, value {value}");
    }

    /// Asserts that `value` fails `schema` with a message containing `expected`.
    fn refuses(schema: Value, value: Value, expected: &str) {
        assert_eq!(check_schema(&schema), Ok(()), "schema {schema}");
        match validate(&schema, &value) {
            Ok(()) => panic!("schema {schema} accepted {value}"),
            Err(message) => assert!(message.contains(expected), "{message:?} lacks {expected:?}"),
        }
    }

    /// Asserts that check_schema refuses `schema` with a message containing `expected`.
    fn bad_schema(schema: Value, expected: &str) {
        match check_schema(&schema) {
            Ok(()) => panic!("check_schema accepted {schema}"),
            Err(message) => assert!(message.contains(expected), "{message:?} lacks {expected:?}"),
        }
    }

    /// A schema `levels` levels deep, each level wrapping the next in `keyword`.
    fn nested(keyword: &str, levels: usize) -> Value {
        let mut schema = json!({});
        for _ in 1..levels {
            schema = match keyword {
                "allOf" => json!({ "allOf": [schema] }),
                _ => json!({ keyword: schema }),
            };
        }
        schema
    }

    #[test]
    fn boolean_and_empty_schemas() {
        accepts(json!(true), json!({"anything": [1, 2]}));
        accepts(json!({}), json!(null));
        refuses(json!(false), json!(null), "(root): no value is allowed here");
        refuses(json!({"properties": {"a": false}}), json!({"a": 1}), "/a: no value is allowed");
        for schema in [json!(null), json!(3), json!("string"), json!([{}])] {
            bad_schema(schema, "schema at (root) must be an object or a boolean");
        }
        bad_schema(json!({"not": 3}), "schema at /not must be an object or a boolean");
    }

    #[test]
    fn type_keyword() {
        accepts(json!({"type": "null"}), json!(null));
        accepts(json!({"type": "boolean"}), json!(false));
        accepts(json!({"type": "object"}), json!({}));
        accepts(json!({"type": "array"}), json!([]));
        accepts(json!({"type": "number"}), json!(2.5));
        accepts(json!({"type": "string"}), json!(""));
        accepts(json!({"type": ["string", "null"]}), json!(null));
        refuses(json!({"type": "string"}), json!(1), "(root): expected a string");
        refuses(json!({"type": "object"}), json!([]), "expected an object");
        refuses(json!({"type": ["string", "null"]}), json!(1), "expected a string or null");
        refuses(json!({"type": "null"}), json!(false), "expected null");
        bad_schema(json!({"type": "float"}), "schema keyword `type` at (root) must be");
        bad_schema(json!({"type": []}), "`type`");
        bad_schema(json!({"type": ["string", 3]}), "`type`");
        bad_schema(json!({"type": 3}), "`type`");
    }

    #[test]
    fn integer_versus_number() {
        accepts(json!({"type": "integer"}), json!(2));
        accepts(json!({"type": "integer"}), json!(2.0));
        accepts(json!({"type": "integer"}), json!(-7));
        accepts(json!({"type": "integer"}), json!(u64::MAX));
        accepts(json!({"type": "integer"}), json!(1e300));
        accepts(json!({"type": "number"}), json!(2));
        refuses(json!({"type": "integer"}), json!(2.5), "expected an integer");
        refuses(json!({"type": "integer"}), json!("2"), "expected an integer");
        refuses(json!({"type": "number"}), json!("2"), "expected a number");
    }

    #[test]
    fn enum_keyword() {
        let schema = json!({"enum": ["red", 1, null, {"a": [1, 2]}]});
        accepts(schema.clone(), json!("red"));
        accepts(schema.clone(), json!(1.0));
        accepts(schema.clone(), json!(null));
        accepts(schema.clone(), json!({"a": [1.0, 2]}));
        refuses(schema.clone(), json!("blue"), "(root): expected one of the `enum` values");
        refuses(schema.clone(), json!({"a": [2, 1]}), "`enum`");
        refuses(schema, json!(1.5), "`enum`");
        refuses(json!({"enum": []}), json!(null), "`enum`");
        bad_schema(json!({"enum": "red"}), "schema keyword `enum` at (root) must be an array");
    }

    #[test]
    fn const_keyword() {
        accepts(json!({"const": {"x": 1, "y": [true]}}), json!({"y": [true], "x": 1.0}));
        accepts(json!({"const": null}), json!(null));
        refuses(json!({"const": null}), json!(false), "(root): expected the `const` value");
        refuses(json!({"const": {"x": 1}}), json!({"x": 1, "y": 2}), "`const`");
        refuses(json!({"const": [1, 2]}), json!([1, 2, 3]), "`const`");
    }

    #[test]
    fn numbers_compare_numerically() {
        let numbers = [json!(-1e300), json!(i64::MIN), json!(-2.5), json!(-2), json!(0)];
        let more = [json!(0.5), json!(1), json!(1.5), json!(u64::MAX), json!(1e300)];
        let all: Vec<&Value> = numbers.iter().chain(more.iter()).collect();
        for (i, left) in all.iter().enumerate() {
            for (j, right) in all.iter().enumerate() {
                assert_eq!(compare_json(left, right), i.cmp(&j), "{left} vs {right}");
            }
        }
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert!(json_equal(&json!(0), &json!(-0.0)));
        assert!(json_equal(&json!(u64::MAX), &json!(u64::MAX)));
        assert!(!json_equal(&json!(9_007_199_254_740_993_u64), &json!(9_007_199_254_740_992.0)));
        assert!(!json_equal(&json!(1), &json!(true)));
        assert!(!json_equal(&json!("1"), &json!(1)));
    }

    #[test]
    fn number_bounds() {
        accepts(json!({"minimum": 1, "maximum": 3}), json!(1));
        accepts(json!({"minimum": 1, "maximum": 3}), json!(3.0));
        accepts(json!({"exclusiveMinimum": 1, "exclusiveMaximum": 3}), json!(2.999));
        accepts(json!({"minimum": 0.5}), json!(1));
        accepts(json!({"minimum": 5}), json!("not a number"));
        refuses(json!({"minimum": 1}), json!(0.999), "(root): expected at least 1");
        refuses(json!({"maximum": 3}), json!(4), "expected at most 3");
        refuses(json!({"exclusiveMinimum": 1}), json!(1.0), "expected more than 1");
        refuses(json!({"exclusiveMaximum": 2.5}), json!(2.5), "expected less than 2.5");
        refuses(json!({"maximum": -1}), json!(u64::MAX), "expected at most -1");
        bad_schema(json!({"minimum": "1"}), "schema keyword `minimum` at (root) must be a number");
        bad_schema(json!({"exclusiveMaximum": true}), "`exclusiveMaximum`");
    }

    #[test]
    fn string_lengths_count_chars() {
        accepts(json!({"minLength": 3, "maxLength": 3}), json!("héé"));
        accepts(json!({"maxLength": 1}), json!("😀"));
        accepts(json!({"minLength": 2.0}), json!("ab"));
        accepts(json!({"maxLength": 0}), json!(5));
        refuses(json!({"minLength": 4}), json!("héé"), "(root): expected at least 4 characters");
        refuses(json!({"maxLength": 1}), json!("ab"), "expected at most 1 character");
        bad_schema(json!({"minLength": "3"}), "schema keyword `minLength` at (root) must be");
        bad_schema(json!({"maxLength": -1}), "non-negative integer");
        bad_schema(json!({"minLength": 2.5}), "non-negative integer");
    }

    #[test]
    fn array_counts_and_items() {
        accepts(json!({"minItems": 1, "maxItems": 2}), json!([1, 2]));
        accepts(json!({"items": {"type": "string"}}), json!(["a", "b"]));
        accepts(json!({"items": false}), json!([]));
        accepts(json!({"items": {"type": "string"}}), json!("not an array"));
        refuses(json!({"minItems": 1}), json!([]), "(root): expected at least 1 item");
        refuses(json!({"maxItems": 2}), json!([1, 2, 3]), "expected at most 2 items");
        refuses(
            json!({"items": {"type": "string"}}),
            json!(["a", "b", 3]),
            "/2: expected a string",
        );
        bad_schema(json!({"minItems": -1}), "schema keyword `minItems` at (root)");
        bad_schema(json!({"maxItems": null}), "`maxItems`");
        bad_schema(json!({"items": [{}]}), "schema keyword `items` at (root) must be one schema");
    }

    #[test]
    fn unique_items() {
        accepts(json!({"uniqueItems": true}), json!([1, "1", [1], {"a": 1}, {"a": 2}, null]));
        accepts(json!({"uniqueItems": false}), json!([1, 1]));
        accepts(json!({"uniqueItems": true}), json!([]));
        refuses(json!({"uniqueItems": true}), json!([0, 1, 2, 1.0]), "items 1 and 3 are equal");
        refuses(
            json!({"uniqueItems": true}),
            json!([{"a": [1], "b": 2}, 5, 5, {"b": 2, "a": [1.0]}]),
            "(root): expected unique items, but items 1 and 2 are equal",
        );
        bad_schema(json!({"uniqueItems": 1}), "schema keyword `uniqueItems` at (root)");
    }

    #[test]
    fn objects() {
        let schema = json!({
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"],
            "additionalProperties": false,
        });
        accepts(schema.clone(), json!({"name": "x"}));
        accepts(schema.clone(), json!({"name": "x", "age": 3}));
        accepts(schema.clone(), json!([1]));
        refuses(schema.clone(), json!({}), "(root): missing required property `name`");
        refuses(schema.clone(), json!({"name": 1}), "/name: expected a string");
        refuses(schema, json!({"name": "x", "extra": 1}), "(root): unexpected property `extra`");
        let open = json!({"properties": {"a": {}}, "additionalProperties": {"type": "number"}});
        accepts(open.clone(), json!({"a": "any", "b": 1}));
        refuses(open, json!({"a": "any", "b": "x"}), "/b: expected a number");
        bad_schema(json!({"required": [1]}), "schema keyword `required` at (root)");
        bad_schema(json!({"required": "name"}), "`required`");
        bad_schema(json!({"properties": []}), "schema keyword `properties` at (root)");
        bad_schema(json!({"properties": {"a": 1}}), "schema at /properties/a must be");
        bad_schema(json!({"additionalProperties": 1}), "schema at /additionalProperties");
    }

    #[test]
    fn nested_paths_in_messages() {
        let schema =
            json!({"properties": {"a/b~c": {"items": {"properties": {"x": {"type": "string"}}}}}});
        refuses(
            schema,
            json!({"a/b~c": [{"x": "ok"}, {"x": 1}]}),
            "/a~1b~0c/1/x: expected a string",
        );
        let items = json!({"properties": {"items": {"items": {"type": "string"}}}});
        refuses(items, json!({"items": ["a", "b", 3]}), "/items/2: expected a string");
    }

    #[test]
    fn all_of_any_of_not() {
        let all = json!({"allOf": [{"type": "integer"}, {"minimum": 2}]});
        accepts(all.clone(), json!(3));
        refuses(all.clone(), json!(1), "(root): expected at least 2");
        refuses(all, json!(2.5), "expected an integer");
        let any = json!({"anyOf": [{"type": "string"}, {"minimum": 2}]});
        accepts(any.clone(), json!("x"));
        accepts(any.clone(), json!(3));
        refuses(any, json!(1), "(root): matches none of the `anyOf` schemas");
        accepts(json!({"not": {"type": "string"}}), json!(1));
        refuses(json!({"not": {"type": "string"}}), json!("x"), "(root): matches the `not`");
        bad_schema(json!({"anyOf": []}), "schema keyword `anyOf` at (root) must be a non-empty");
        bad_schema(json!({"allOf": {}}), "`allOf`");
        bad_schema(json!({"allOf": [{}, 3]}), "schema at /allOf/1 must be");
    }

    #[test]
    fn one_of_counts_matches() {
        let schema = json!({"oneOf": [{"type": "integer"}, {"minimum": 10}]});
        accepts(schema.clone(), json!(3));
        accepts(schema.clone(), json!(10.5));
        refuses(schema.clone(), json!(-0.5), "(root): matches none of the `oneOf` schemas");
        refuses(schema, json!(11), "matches more than one of the `oneOf` schemas (0 and 1)");
        bad_schema(json!({"oneOf": "x"}), "schema keyword `oneOf` at (root)");
    }

    #[test]
    fn depth_limit() {
        for keyword in ["items", "not", "allOf", "additionalProperties"] {
            assert_eq!(check_schema(&nested(keyword, MAX_DEPTH)), Ok(()), "{keyword}");
            bad_schema(nested(keyword, MAX_DEPTH + 1), "schema nested deeper than 32 levels");
        }
        let mut properties = json!({});
        for _ in 1..=MAX_DEPTH {
            properties = json!({"properties": {"p": properties}});
        }
        bad_schema(properties, "deeper than 32 levels at /properties/p/properties/p");
        assert_eq!(validate(&nested("allOf", MAX_DEPTH), &json!(1)), Ok(()));
        let too_deep = validate(&nested("allOf", MAX_DEPTH + 1), &json!(1));
        assert!(too_deep.is_err_and(|message| message.contains("deeper than 32 levels")));
    }

    #[test]
    fn annotations_are_ignored() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "urn:x",
            "$comment": 5,
            "title": "T",
            "description": "D",
            "default": {"pattern": 1},
            "examples": [1, 2],
            "format": "email",
            "deprecated": true,
            "readOnly": false,
            "writeOnly": false,
            "type": "string",
        });
        accepts(schema.clone(), json!("not an email"));
        refuses(schema, json!(1), "expected a string");
    }

    #[test]
    fn unsupported_keywords_are_refused() {
        bad_schema(
            json!({"properties": {"x": {"pattern": "^a"}}}),
            "unsupported schema keyword `pattern` at /properties/x",
        );
        for keyword in ["$ref", "patternProperties", "if", "then", "$defs", "prefixItems"] {
            bad_schema(
                json!({ keyword: {} }),
                &format!("unsupported schema keyword `{keyword}` at (root)"),
            );
        }
        bad_schema(json!({"anyOf": [{}, {"contains": {}}]}), "`contains` at /anyOf/1");
    }

    #[test]
    fn validation_stops_when_its_steps_run_out() {
        let branches: Vec<Value> = (0..10).map(|_| json!({"type": "number"})).collect();
        let schema = json!({"items": {"allOf": branches}});
        let numbers = json!((0..100).collect::<Vec<u32>>());
        // One step for the root, then per item one for `items` and ten for its branches.
        assert_eq!(validate_within(&schema, &numbers, 1 + 100 * 11), Ok(()));
        assert_eq!(validate_within(&schema, &numbers, 100 * 11), Err(Refusal::TooMuchWork));
        let not_schema = json!({"not": {"allOf": [{"type": "number"}, {"type": "number"}]}});
        let refused = validate_within(&not_schema, &json!(1), 2);
        assert_eq!(refused, Err(Refusal::TooMuchWork), "a `not` that ran out does not pass");
    }

    #[test]
    fn validate_survives_refused_schemas() {
        let refused = [
            json!(3),
            json!({"pattern": "a"}),
            json!({"minLength": "3"}),
            json!({"type": "float"}),
            json!({"enum": 1}),
            json!({"required": [1]}),
            json!({"properties": 1}),
            json!({"anyOf": []}),
            json!({"oneOf": 1}),
            json!({"allOf": 1}),
            json!({"minimum": "1"}),
            json!({"uniqueItems": "yes"}),
            json!({"items": [1]}),
        ];
        let value = json!({"a": ["text", 1, [null]]});
        for schema in refused {
            assert!(check_schema(&schema).is_err(), "{schema}");
            let outer = json!({"properties": {"a": {"items": schema}}});
            let _ = validate(&schema, &value);
            let _ = validate(&outer, &value);
        }
        assert!(validate(&json!({"pattern": "a"}), &json!("b")).is_err());
        assert!(validate(&json!({"minLength": "3"}), &json!("b")).is_err());
        assert!(validate(&json!(3), &json!("b")).is_err());
    }

    /// An array nested `levels` deep around 1, built without recursion.
    fn deep_array(levels: usize) -> Value {
        let mut deep = json!(1);
        for _ in 0..levels {
            deep = Value::Array(vec![deep]);
        }
        deep
    }

    /// Drops a deeply nested array without recursing (serde_json's drop recurses).
    fn drop_deep(mut value: Value) {
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn comparing_deep_values_does_not_recurse() {
        let (left, right) = (deep_array(100_000), deep_array(100_000));
        assert!(json_equal(&left, &right));
        let shorter = deep_array(99_999);
        assert!(!json_equal(&left, &shorter));
        drop_deep(shorter);
        assert!(validate(&json!({"const": 2}), &left).is_err());
        assert_eq!(validate(&json!({"uniqueItems": true, "maxItems": 1}), &right), Ok(()));
        drop_deep(left);
        drop_deep(right);
    }
}
