//! The model of workflows (DESIGN.md §5.2) for one tenant: immutable definitions, executions
//! with the status machine, a compare-and-set state (set, merge patch, append to an array
//! member), the execution's event stream with its lifecycle events, snapshots, load and
//! replay, and deletion. The caller passes the store's time to every call that writes.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use spindle::{Execution, WorkflowStatus};

use super::events::ModelEvent;
use super::{Expect, Refusal};

/// One execution: its record, its events (seq from 1) and its snapshots by sequence.
#[derive(Debug, Clone)]
pub struct ModelExecution {
    pub record: Execution,
    pub events: Vec<ModelEvent>,
    pub snapshots: BTreeMap<u64, (Value, i64)>,
}

/// The definitions and executions of one tenant.
#[derive(Debug, Clone, Default)]
pub struct WorkflowModel {
    /// `(workflow_id, version) -> (ir, created_at_ms)`.
    pub definitions: BTreeMap<(String, String), (Value, i64)>,
    /// The versions of each workflow in the order they were put.
    pub versions: BTreeMap<String, Vec<String>>,
    pub executions: BTreeMap<String, ModelExecution>,
}

/// RFC 7396 JSON Merge Patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(object) = target.as_object_mut() else { return };
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The lifecycle event a status move appends.
pub fn lifecycle_event(from: WorkflowStatus, to: WorkflowStatus) -> &'static str {
    match (from, to) {
        (WorkflowStatus::Paused, WorkflowStatus::Running) => "workflow.resumed",
        (_, WorkflowStatus::Running) => "workflow.started",
        (_, WorkflowStatus::Paused) => "workflow.paused",
        (_, WorkflowStatus::Completed) => "workflow.completed",
        (_, WorkflowStatus::Failed) => "workflow.failed",
        (_, WorkflowStatus::Cancelled) => "workflow.cancelled",
        (_, WorkflowStatus::LimitExceeded) => "workflow.limit_exceeded",
        (_, WorkflowStatus::Pending) => "workflow.pending",
        (_, other) => panic!("the model has no event for a move to {other:?}"),
    }
}

impl WorkflowModel {
    /// Puts a definition: `Ok(created_at_ms)` of the stored one (new or the same again).
    pub fn put_definition(
        &mut self,
        id: &str,
        version: &str,
        ir: &Value,
        now_ms: i64,
    ) -> Expect<i64> {
        let key = (id.to_owned(), version.to_owned());
        if let Some((existing, at)) = self.definitions.get(&key) {
            return if existing == ir { Ok(*at) } else { Err(Refusal::Conflict) };
        }
        self.definitions.insert(key, (ir.clone(), now_ms));
        self.versions.entry(id.to_owned()).or_default().push(version.to_owned());
        Ok(now_ms)
    }

    /// The version put last.
    pub fn latest(&self, id: &str) -> Option<String> {
        self.versions.get(id).and_then(|versions| versions.last().cloned())
    }

    /// Whether a new execution of the definition may be created.
    pub fn can_create(&self, id: &str, version: &str) -> Expect<()> {
        let key = (id.to_owned(), version.to_owned());
        if self.definitions.contains_key(&key) { Ok(()) } else { Err(Refusal::NotFound) }
    }

    /// The record a new execution must have (the store draws its id).
    pub fn expected_new(
        id: &str,
        workflow: &str,
        version: &str,
        input: Value,
        now_ms: i64,
    ) -> Execution {
        Execution {
            id: id.to_owned(),
            workflow_id: workflow.to_owned(),
            workflow_version: version.to_owned(),
            status: WorkflowStatus::Pending,
            input,
            state: json!({}),
            state_version: 0,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            completed_at_ms: None,
        }
    }

    /// Records an execution the store created.
    pub fn created(&mut self, record: Execution) {
        let execution = ModelExecution { record, events: Vec::new(), snapshots: BTreeMap::new() };
        self.executions.insert(execution.record.id.clone(), execution);
    }

    fn get_mut(&mut self, id: &str) -> Expect<&mut ModelExecution> {
        self.executions.get_mut(id).ok_or(Refusal::NotFound)
    }

    /// Moves the status, appending the lifecycle event.
    pub fn set_status(&mut self, id: &str, to: WorkflowStatus, now_ms: i64) -> Expect<Execution> {
        let execution = self.get_mut(id)?;
        let from = execution.record.status;
        if !from.can_become(to) {
            return Err(Refusal::Conflict);
        }
        let record = &mut execution.record;
        record.status = to;
        record.updated_at_ms = now_ms;
        record.completed_at_ms = to.is_terminal().then_some(now_ms);
        let payload = json!({
            "from": from.as_str(),
            "to": to.as_str(),
            "workflow_id": record.workflow_id,
            "workflow_version": record.workflow_version,
        });
        push_event(execution, lifecycle_event(from, to), payload, now_ms);
        Ok(execution.record.clone())
    }

    /// Replaces the state if its version is `expected_version` (the stale check comes first).
    pub fn set_state(
        &mut self,
        id: &str,
        expected: u64,
        state: Value,
        now_ms: i64,
    ) -> Expect<Execution> {
        let execution = self.get_mut(id)?;
        if execution.record.state_version != expected {
            return Err(Refusal::Conflict);
        }
        save_state(execution, state, now_ms)
    }

    /// Merges `patch` into the state.
    pub fn patch_state(&mut self, id: &str, patch: &Value, now_ms: i64) -> Expect<Execution> {
        let execution = self.get_mut(id)?;
        let mut state = execution.record.state.clone();
        merge_patch(&mut state, patch);
        save_state(execution, state, now_ms)
    }

    /// Pushes `value` to the array member `key` of the state (made when absent).
    pub fn append_to_array(
        &mut self,
        id: &str,
        key: &str,
        value: Value,
        now_ms: i64,
    ) -> Expect<Execution> {
        let execution = self.get_mut(id)?;
        let mut state = execution.record.state.clone();
        let fields = state.as_object_mut().ok_or(Refusal::InvalidInput)?;
        let member = fields.entry(key.to_owned()).or_insert_with(|| json!([]));
        member.as_array_mut().ok_or(Refusal::InvalidInput)?.push(value);
        save_state(execution, state, now_ms)
    }

    /// Appends a caller's event: its sequence.
    pub fn append_event(
        &mut self,
        id: &str,
        event_type: &str,
        payload: Value,
        now_ms: i64,
    ) -> Expect<u64> {
        if event_type.starts_with("workflow.") {
            return Err(Refusal::InvalidInput);
        }
        let execution = self.get_mut(id)?;
        if execution.record.status.is_terminal() {
            return Err(Refusal::Conflict);
        }
        Ok(push_event(execution, event_type, payload, now_ms))
    }

    /// Writes a snapshot at `at_seq`: the one stored (new, or the same again).
    pub fn write_snapshot(
        &mut self,
        id: &str,
        at_seq: u64,
        state: Value,
        now_ms: i64,
    ) -> Expect<(Value, i64)> {
        let execution = self.get_mut(id)?;
        if at_seq > execution.events.len() as u64 {
            return Err(Refusal::InvalidInput);
        }
        if let Some(existing) = execution.snapshots.get(&at_seq) {
            return if existing.0 == state { Ok(existing.clone()) } else { Err(Refusal::Conflict) };
        }
        execution.snapshots.insert(at_seq, (state.clone(), now_ms));
        Ok((state, now_ms))
    }

    /// The latest snapshot `(at_seq, state, created_at_ms)`.
    pub fn latest_snapshot(&self, id: &str) -> Expect<Option<(u64, Value, i64)>> {
        let execution = self.executions.get(id).ok_or(Refusal::NotFound)?;
        let last = execution.snapshots.iter().next_back();
        Ok(last.map(|(seq, (state, at))| (*seq, state.clone(), *at)))
    }

    /// The events after the latest snapshot (after 0 without one).
    pub fn load_events(&self, id: &str) -> Expect<Vec<ModelEvent>> {
        let execution = self.executions.get(id).ok_or(Refusal::NotFound)?;
        let after = execution.snapshots.keys().next_back().copied().unwrap_or(0);
        Ok(execution.events.iter().filter(|e| e.0 > after).cloned().collect())
    }

    /// Deletes an execution with its events and snapshots: whether it existed.
    pub fn delete(&mut self, id: &str) -> bool {
        self.executions.remove(id).is_some()
    }
}

fn push_event(
    execution: &mut ModelExecution,
    event_type: &str,
    payload: Value,
    now_ms: i64,
) -> u64 {
    let seq = execution.events.len() as u64 + 1;
    execution.events.push((seq, event_type.to_owned(), payload, now_ms));
    seq
}

/// The next version of the state, unless the execution has finished.
fn save_state(execution: &mut ModelExecution, state: Value, now_ms: i64) -> Expect<Execution> {
    if execution.record.status.is_terminal() {
        return Err(Refusal::Conflict);
    }
    let record = &mut execution.record;
    record.state = state;
    record.state_version += 1;
    record.updated_at_ms = now_ms;
    Ok(record.clone())
}
