//! What a process's events mean: the default event types, checking and hashing a
//! registration, and working out an event's terminal output and wake from its payload.
//!
//! Pure functions of their arguments: no SQL, no clock.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::schema;
use super::types::{
    AwaitOutput, DedupeKey, EventSemantics, EventType, Registration, Selector, TerminalSemantics,
    TerminalSpec, TerminalState, Wake, WakeSpec,
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

/// Checks ids, event type names (non-blank, unique), schemas and terminal specs.
fn check_registration(registration: &Registration, limits: &Limits) -> Result<()> {
    limits.check_id("process id", &registration.id)?;
    limits.check_id("process kind", &registration.identity.kind)?;
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
    schema::check_schema(&event_type.payload_schema).map_err(|why| {
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

/// Works out what an event of `event_type` with `payload` means, at sequence `seq` of
/// `process_id`. A selector that does not match fails the append (`InvalidInput`).
pub(crate) fn materialize(
    event_type: &EventType,
    process_id: &str,
    seq: u64,
    payload: &Value,
) -> Result<EventSemantics> {
    let spec = &event_type.semantics;
    let terminal = match &spec.terminal {
        Some(terminal) => Some(terminal_semantics(terminal, payload)?),
        None => None,
    };
    let wake = match &spec.wake {
        Some(wake) => wake_semantics(wake, process_id, seq, payload)?,
        None => None,
    };
    Ok(EventSemantics { terminal, wake })
}

/// Checks `payload` against the event type's schema.
pub(crate) fn check_payload(event_type: &EventType, payload: &Value) -> Result<()> {
    schema::validate(&event_type.payload_schema, payload).map_err(|why| {
        invalid(format!("{} payload does not meet its schema: {why}", event_type.name))
    })
}

/// The output a terminal event leaves: the selected value read as an `AwaitOutput`, or, when
/// it is not one, the value wrapped as the state's output.
fn terminal_semantics(spec: &TerminalSpec, payload: &Value) -> Result<TerminalSemantics> {
    let selected = match &spec.await_output {
        Some(selector) => select(selector, payload)?,
        None => payload.clone(),
    };
    let await_output = match serde_json::from_value::<AwaitOutput>(selected.clone()) {
        Ok(output) if output.terminal_state() == spec.state => output,
        _ => coerce_output(spec.state, selected),
    };
    Ok(TerminalSemantics { state: spec.state, await_output })
}

fn coerce_output(state: TerminalState, value: Value) -> AwaitOutput {
    match state {
        TerminalState::Completed => AwaitOutput::Success { value, control: None },
        TerminalState::Failed => AwaitOutput::Failure {
            class: "execution".to_owned(),
            code: "process_failed".to_owned(),
            message: stringify(&value),
            raw: Some(value),
            control: None,
        },
        TerminalState::Cancelled => {
            AwaitOutput::Cancelled { message: stringify(&value), raw: Some(value), control: None }
        }
    }
}

/// The wake an event carries, unless its `when` selects a falsy value.
fn wake_semantics(
    spec: &WakeSpec,
    process_id: &str,
    seq: u64,
    payload: &Value,
) -> Result<Option<Wake>> {
    if let Some(when) = &spec.when
        && !truthy(&select(when, payload)?)
    {
        return Ok(None);
    }
    let input = stringify(&select(&spec.input, payload)?);
    let dedupe_key = match &spec.dedupe_key {
        DedupeKey::EventIdentity => format!("{process_id}:{seq}"),
        DedupeKey::Selector(selector) => stringify(&select(selector, payload)?),
        DedupeKey::Const(key) => key.clone(),
    };
    Ok(Some(Wake { input, dedupe_key }))
}

/// The id of a wake to `scope_id` with `dedupe_key`: equal for duplicate wakes.
pub(crate) fn wake_id(scope_id: &str, dedupe_key: &str) -> String {
    format!("wake:{}", content_hash(&json!([scope_id, dedupe_key])))
}

/// Picks a value out of `payload`.
pub(crate) fn select(selector: &Selector, payload: &Value) -> Result<Value> {
    match selector {
        Selector::Payload => Ok(payload.clone()),
        Selector::Pointer(pointer) => payload
            .pointer(pointer)
            .cloned()
            .ok_or_else(|| invalid(format!("payload pointer {pointer:?} did not match"))),
        Selector::Const(value) => Ok(value.clone()),
        Selector::Template { template, fields } => {
            let mut text = template.clone();
            for (name, field) in fields {
                let value = stringify(&select(field, payload)?);
                text = text.replace(&format!("{{{name}}}"), &value);
            }
            Ok(Value::String(text))
        }
        Selector::Present(pointer) => Ok(Value::Bool(payload.pointer(pointer).is_some())),
    }
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
        assert_eq!(select(&template, &payload).ok(), Some(json!("line done #7")));
        assert_eq!(select(&Selector::Present("/n".into()), &payload).ok(), Some(json!(true)));
        assert_eq!(select(&Selector::Present("/x".into()), &payload).ok(), Some(json!(false)));
        assert!(matches!(
            select(&Selector::Pointer("/x".into()), &payload),
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
        let semantics = terminal_semantics(&failed, &json!({"await_output": "boom"}));
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
