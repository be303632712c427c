//! What a process's events mean: the default event types, checking and hashing a
//! registration, and working out an event's terminal output and wake from its payload.
//!
//! Pure functions of their arguments: no SQL, no clock.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::json_schema;
use super::types::{
    AwaitOutput, DedupeKey, EventSemantics, EventType, Originator, Registration, Selector,
    SemanticsSpec, SessionScope, TerminalSemantics, TerminalSpec, TerminalState, Wake, WakeSpec,
};
use crate::error::{Error, Result};
use crate::hash::content_hash;
use crate::limits::Limits;

/// The event type every process may use to ask for its cancellation (needs a replay key).
pub(crate) const CANCEL_REQUESTED: &str = "process.cancel_requested";

/// The event types every process declares, in the order they are appended when missing.
pub(crate) fn default_event_types() -> Vec<EventType> {
    let terminal = |state: TerminalState| {
        EventType::new(state.event_type()).terminal(TerminalSpec {
            state,
            await_output: Some(Selector::Pointer("/await_output".to_owned())),
        })
    };
    vec![
        EventType::new(CANCEL_REQUESTED),
        EventType::new("process.waiting"),
        EventType::new("process.resumed"),
        terminal(TerminalState::Completed),
        terminal(TerminalState::Failed),
        terminal(TerminalState::Cancelled),
    ]
}

/// Completes a registration with the default event types, checks it, and returns it with its
/// hash and its encoded form (bounded, event types included, by `payload_bytes_max`).
pub(crate) fn prepare(mut registration: Registration, limits: &Limits) -> Result<Prepared> {
    for default in default_event_types() {
        if !registration.event_types.iter().any(|declared| declared.name == default.name) {
            registration.event_types.push(default);
        }
    }
    check_registration(&registration, limits)?;
    let value = serde_json::to_value(&registration)?;
    let encoded = serde_json::to_string(&value)?;
    limits.check_payload("process registration bytes", &encoded)?;
    let hash = content_hash(&value);
    Ok(Prepared { registration, hash, encoded })
}

/// A registration with its defaults, its hash and its stored text.
pub(crate) struct Prepared {
    pub(crate) registration: Registration,
    pub(crate) hash: String,
    pub(crate) encoded: String,
}

/// Checks the nesting of everything a registration carries (its JSON values and its
/// selectors, which templates nest) without recursing: it runs on the caller's thread, before
/// anything serialises the registration. The error names the deepest nesting found.
pub(crate) fn check_registration_shape(registration: &Registration, limits: &Limits) -> Result<()> {
    let values = [&registration.identity.definition, &registration.caused_by];
    let mut deepest = crate::limits::value_depth(&registration.input);
    for value in values.into_iter().flatten() {
        deepest = deepest.max(crate::limits::value_depth(value));
    }
    let mut selectors: Vec<(&Selector, usize)> = Vec::new();
    for event_type in &registration.event_types {
        deepest = deepest.max(crate::limits::value_depth(&event_type.payload_schema));
        selectors.extend(selectors_of(&event_type.semantics).into_iter().map(|s| (s, 1)));
    }
    while let Some((selector, depth)) = selectors.pop() {
        deepest = deepest.max(depth);
        match selector {
            Selector::Const(value) => {
                deepest = deepest.max(depth + crate::limits::value_depth(value));
            }
            Selector::Template { fields, .. } => {
                selectors.extend(fields.values().map(|field| (field, depth + 1)));
            }
            Selector::Payload | Selector::Pointer(_) | Selector::Present(_) => {}
        }
    }
    limits.check_nesting(deepest)
}

/// The selectors an event type's semantics use.
fn selectors_of(spec: &SemanticsSpec) -> Vec<&Selector> {
    let terminal = spec.terminal.as_ref().and_then(|terminal| terminal.await_output.as_ref());
    let mut selectors: Vec<&Selector> = terminal.into_iter().collect();
    if let Some(wake) = &spec.wake {
        selectors.extend(wake.when.as_ref());
        selectors.push(&wake.input);
        if let DedupeKey::Selector(selector) = &wake.dedupe_key {
            selectors.push(selector);
        }
    }
    selectors
}

/// Checks the nesting of the values an output carries.
pub(crate) fn check_output_shape(output: &AwaitOutput, limits: &Limits) -> Result<()> {
    let values: [Option<&Value>; 2] = match output {
        AwaitOutput::Success { value, control } => [Some(value), control.as_ref()],
        AwaitOutput::Failure { raw, control, .. } | AwaitOutput::Cancelled { raw, control, .. } => {
            [raw.as_ref(), control.as_ref()]
        }
    };
    limits.check_depths(values.into_iter().flatten())
}

/// Checks ids, event type names (non-blank, unique), schemas and terminal specs.
fn check_registration(registration: &Registration, limits: &Limits) -> Result<()> {
    limits.check_id("process id", &registration.id)?;
    limits.check_id("process kind", &registration.identity.kind)?;
    if let Some(scope) = &registration.wake_target {
        check_scope(limits, scope)?;
    }
    if let Originator::Session { scope } = &registration.originator {
        check_scope(limits, scope)?;
    }
    let mut names = BTreeSet::new();
    for event_type in &registration.event_types {
        limits.check_id("event type", &event_type.name)?;
        if event_type.name.trim().is_empty() || !names.insert(event_type.name.as_str()) {
            return Err(invalid(format!(
                "event type {:?} is blank or declared twice",
                event_type.name
            )));
        }
        check_event_type(event_type)?;
    }
    Ok(())
}

fn check_event_type(event_type: &EventType) -> Result<()> {
    json_schema::check_schema(&event_type.payload_schema).map_err(|why| {
        invalid(format!("event type {:?}: payload schema: {why}", event_type.name))
    })?;
    let Some(terminal) = &event_type.semantics.terminal else {
        return Ok(());
    };
    if terminal.state != TerminalState::Completed && terminal.await_output.is_none() {
        return Err(invalid(format!(
            "event type {:?} ends the process {:?} and must select its await_output",
            event_type.name, terminal.state
        )));
    }
    Ok(())
}

/// Checks a scope's ids; a session id may not hold `/`, so scope ids cannot collide
/// (`session:a/frame:b` is frame `b` of session `a`, never a session `a/frame:b`).
pub(crate) fn check_scope(limits: &Limits, scope: &SessionScope) -> Result<()> {
    limits.check_id("session id", &scope.session_id)?;
    if scope.session_id.contains('/') {
        return Err(Error::InvalidInput(format!(
            "session id {:?} may not hold '/'",
            scope.session_id
        )));
    }
    if let Some(frame) = scope.agent_frame_id.as_deref().filter(|frame| !frame.is_empty()) {
        limits.check_id("agent frame id", frame)?;
    }
    Ok(())
}

/// Works out what an event of `event_type` with `payload` means, at sequence `seq` of
/// `process_id`. A selector that does not match fails the append (`InvalidInput`).
pub(crate) fn materialize(
    event_type: &EventType,
    process_id: &str,
    seq: u64,
    payload: &Value,
    limit_bytes: usize,
) -> Result<EventSemantics> {
    let spec = &event_type.semantics;
    let terminal = match &spec.terminal {
        Some(terminal) => Some(terminal_semantics(terminal, payload, limit_bytes)?),
        None => None,
    };
    let wake = match &spec.wake {
        Some(wake) => wake_semantics(wake, process_id, seq, payload, limit_bytes)?,
        None => None,
    };
    Ok(EventSemantics { terminal, wake })
}

/// The most steps checking one payload against its schema may take (a step: one schema
/// applied at one place of the payload; a few hundred nanoseconds each).
const SCHEMA_STEPS_MAX: u64 = 1_000_000;

/// Checks `payload` against the event type's schema, within `SCHEMA_STEPS_MAX` steps.
pub(crate) fn check_payload(event_type: &EventType, payload: &Value) -> Result<()> {
    match json_schema::validate_within(&event_type.payload_schema, payload, SCHEMA_STEPS_MAX) {
        Ok(()) => Ok(()),
        Err(json_schema::Refusal::Mismatch(why)) => {
            Err(invalid(format!("{} payload does not meet its schema: {why}", event_type.name)))
        }
        Err(json_schema::Refusal::TooMuchWork) => Err(Error::TooLarge {
            what: "payload schema validation steps",
            limit: SCHEMA_STEPS_MAX,
            actual: SCHEMA_STEPS_MAX + 1,
        }),
    }
}

/// The output a terminal event leaves: the selected value read as an `AwaitOutput`, or, when
/// it is not one, the value wrapped as the state's output. An output of another state is
/// refused (the seed kept it under the event type's state: a "completed" failure).
fn terminal_semantics(
    spec: &TerminalSpec,
    payload: &Value,
    limit_bytes: usize,
) -> Result<TerminalSemantics> {
    let selected = match &spec.await_output {
        Some(selector) => select(selector, payload, limit_bytes)?,
        None => payload.clone(),
    };
    let await_output = match serde_json::from_value::<AwaitOutput>(selected.clone()) {
        Ok(output) if output.terminal_state() == spec.state => output,
        Ok(output) => {
            return Err(invalid(format!(
                "a {:?} output cannot end a process {:?}",
                output.terminal_state(),
                spec.state
            )));
        }
        Err(_) => coerce_output(spec.state, selected),
    };
    Ok(TerminalSemantics { state: spec.state, await_output })
}

fn coerce_output(state: TerminalState, value: Value) -> AwaitOutput {
    match state {
        TerminalState::Completed => AwaitOutput::Success { value, control: None },
        TerminalState::Failed => AwaitOutput::Failure {
            class: "execution".to_owned(),
            code: "process_failed".to_owned(),
            message: message_of(&value),
            raw: Some(value),
            control: None,
        },
        TerminalState::Cancelled => {
            AwaitOutput::Cancelled { message: message_of(&value), raw: Some(value), control: None }
        }
    }
}

/// A failure's message: the value as text, its first `MESSAGE_BYTES_MAX` bytes (the whole
/// value is kept beside it as `raw`).
fn message_of(value: &Value) -> String {
    let mut text = stringify(value);
    if text.len() > MESSAGE_BYTES_MAX {
        let mut end = MESSAGE_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The longest message worked out of a terminal value that is not an output.
const MESSAGE_BYTES_MAX: usize = 1024;

/// The wake an event carries, unless its `when` selects a falsy value.
fn wake_semantics(
    spec: &WakeSpec,
    process_id: &str,
    seq: u64,
    payload: &Value,
    limit_bytes: usize,
) -> Result<Option<Wake>> {
    if let Some(when) = &spec.when
        && !truthy(&select(when, payload, limit_bytes)?)
    {
        return Ok(None);
    }
    let input = stringify(&select(&spec.input, payload, limit_bytes)?);
    let dedupe_key = match &spec.dedupe_key {
        DedupeKey::EventIdentity => format!("{process_id}:{seq}"),
        DedupeKey::Selector(selector) => stringify(&select(selector, payload, limit_bytes)?),
        DedupeKey::Const(key) => key.clone(),
    };
    Ok(Some(Wake { input, dedupe_key }))
}

/// The id of a wake to `scope_id` with `dedupe_key`: equal for duplicate wakes.
pub(crate) fn wake_id(scope_id: &str, dedupe_key: &str) -> String {
    format!("wake:{}", content_hash(&json!([scope_id, dedupe_key])))
}

/// Picks a value out of `payload`; a template's text may grow to `limit_bytes`.
pub(crate) fn select(selector: &Selector, payload: &Value, limit_bytes: usize) -> Result<Value> {
    match selector {
        Selector::Payload => Ok(payload.clone()),
        Selector::Pointer(pointer) => payload
            .pointer(pointer)
            .cloned()
            .ok_or_else(|| invalid(format!("payload pointer {pointer:?} did not match"))),
        Selector::Const(value) => Ok(value.clone()),
        Selector::Template { template, fields } => {
            Ok(Value::String(fill_template(template, fields, payload, limit_bytes)?))
        }
        Selector::Present(pointer) => Ok(Value::Bool(payload.pointer(pointer).is_some())),
    }
}

/// Replaces each `{name}` of `template` that names a field by the field's selected value, in
/// one pass (a value's own braces are not read again), up to `limit_bytes` of text.
fn fill_template(
    template: &str,
    fields: &BTreeMap<String, Selector>,
    payload: &Value,
    limit_bytes: usize,
) -> Result<String> {
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // A placeholder closes before the next '{'; looking no further keeps the pass linear.
        let placeholder = match after.find(['{', '}']) {
            Some(close) if after[close..].starts_with('}') => {
                Some((&after[..close], &after[close + 1..]))
            }
            _ => None,
        };
        match placeholder.and_then(|(name, tail)| fields.get_key_value(name).map(|f| (f, tail))) {
            Some(((name, field), tail)) => {
                if !values.contains_key(name.as_str()) {
                    let value = stringify(&select(field, payload, limit_bytes)?);
                    values.insert(name.as_str(), value);
                }
                out.push_str(values.get(name.as_str()).map_or("", String::as_str));
                rest = tail;
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
        check_text_len(&out, limit_bytes)?;
    }
    out.push_str(rest);
    check_text_len(&out, limit_bytes)?;
    Ok(out)
}

fn check_text_len(text: &str, limit_bytes: usize) -> Result<()> {
    if text.len() > limit_bytes {
        return Err(Error::too_large("wake template text bytes", limit_bytes, text.len()));
    }
    Ok(())
}

/// A string as it is, any other value as JSON text.
fn stringify(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// False for null, false, "", [] and {}; true otherwise (every number is true).
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(fields) => !fields.is_empty(),
        Value::Number(_) => true,
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidInput(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_hash_is_pinned() {
        let registration = Registration::new("proc-1", "tool", json!({"tool": "grep"}))
            .label("grep")
            .event_type(EventType::new("progress").schema(json!({"type": "object"})));
        let prepared = prepare(registration, &Limits::default()).expect("valid registration");
        assert_eq!(prepared.registration.event_types.len(), 7);
        assert_eq!(prepared.registration.event_types[0].name, "progress");
        assert_eq!(prepared.hash, GOLDEN_REGISTRATION_HASH);
    }

    const GOLDEN_REGISTRATION_HASH: &str =
        "555d182e5bdf5db70806e6e2415874ecb4483375d13cc56e07a832e00807c372";

    #[test]
    fn selectors_pick_values_and_templates_fill_in() {
        let payload = json!({"line": "done", "n": 7, "empty": ""});
        let fields = [
            ("line".to_owned(), Selector::Pointer("/line".to_owned())),
            ("n".to_owned(), Selector::Pointer("/n".to_owned())),
        ];
        let template =
            Selector::Template { template: "line {line} #{n}".to_owned(), fields: fields.into() };
        assert_eq!(select(&template, &payload, 1 << 20).ok(), Some(json!("line done #7")));
        let braces = Selector::Template {
            template: "{a{b {n} }c{{n}{".to_owned(),
            fields: [("n".to_owned(), Selector::Pointer("/n".to_owned()))].into(),
        };
        let filled = select(&braces, &payload, 1 << 20).ok();
        assert_eq!(filled, Some(json!("{a{b 7 }c{7{")), "unmatched braces stay as they are");
        assert_eq!(select(&Selector::Present("/n".into()), &payload, 64).ok(), Some(json!(true)));
        assert_eq!(select(&Selector::Present("/x".into()), &payload, 64).ok(), Some(json!(false)));
        assert!(matches!(
            select(&Selector::Pointer("/x".into()), &payload, 64),
            Err(Error::InvalidInput(_))
        ));
        assert!(!truthy(&json!("")) && !truthy(&json!([])) && !truthy(&json!({})));
        assert!(truthy(&json!(0)) && truthy(&json!("x")) && !truthy(&Value::Null));
    }

    #[test]
    fn a_terminal_value_that_is_not_an_output_is_wrapped_as_the_states_output() {
        let failed = TerminalSpec {
            state: TerminalState::Failed,
            await_output: Some(Selector::Pointer("/await_output".into())),
        };
        let semantics = terminal_semantics(&failed, &json!({"await_output": "boom"}), 1 << 20);
        let Ok(TerminalSemantics {
            await_output: AwaitOutput::Failure { message, code, .. }, ..
        }) = semantics
        else {
            panic!("a failure output, got {semantics:?}");
        };
        assert_eq!((message.as_str(), code.as_str()), ("boom", "process_failed"));
    }

    #[test]
    fn a_non_completed_terminal_type_without_a_selector_is_refused() {
        let event_type = EventType::new("gave_up")
            .terminal(TerminalSpec { state: TerminalState::Failed, await_output: None });
        let registration = Registration::new("p", "tool", json!({})).event_type(event_type);
        assert!(matches!(prepare(registration, &Limits::default()), Err(Error::InvalidInput(_))));
    }
}
