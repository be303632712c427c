//! The workflows' operations: one struct each, run with `store.exec` or composed with
//! `tx.exec`.
//!
//! Branching lives here; statements live in `sql.rs`. Every op checks its input before it
//! writes, so bad input writes nothing.

use serde_json::{Value, json};

use super::patch::merge_patch;
use super::{Definition, Execution, ExecutionFilter, Snapshot, WorkflowStatus, sql, stream_of};
use crate::core::counts;
use crate::core::events::{self, Appended, Event};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::hash::content_hash;
use crate::limits::Limits;
use crate::page::Page;

/// Puts a definition version; the same content again returns it and writes nothing, other
/// content is `Conflict`.
#[derive(Debug, Clone, PartialEq)]
pub struct PutDefinition {
    /// The workflow.
    pub workflow_id: String,
    /// The version's name.
    pub version: String,
    /// The definition.
    pub ir: Value,
}

/// One version of a definition, or `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetDefinition {
    /// The workflow.
    pub workflow_id: String,
    /// The version.
    pub version: String,
}

/// The version of a workflow put last, or `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestDefinition {
    /// The workflow.
    pub workflow_id: String,
}

/// A workflow's versions in the order they were put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// The workflow.
    pub workflow_id: String,
}

/// Creates a pending execution of an existing definition.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateExecution {
    /// The workflow.
    pub workflow_id: String,
    /// The version.
    pub version: String,
    /// What it starts with.
    pub input: Value,
}

/// One execution, or `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetExecution {
    /// The execution.
    pub id: String,
}

/// A page of executions, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListExecutions {
    /// Which executions.
    pub filter: ExecutionFilter,
    /// Which page (keyset by execution id, descending).
    pub page: Page,
}

/// Counts the tenant's executions by status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountExecutions;

/// Where the tenant's kept execution counts differ from a recount of its executions; see
/// [`Workflows::audit_counts`](super::Workflows::audit_counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts;

/// Moves an execution along the status machine, with its lifecycle event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetStatus {
    /// The execution.
    pub id: String,
    /// The new status.
    pub status: WorkflowStatus,
}

/// Replaces an execution's state if its version is still `expected_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct SetState {
    /// The execution.
    pub id: String,
    /// The version the caller read.
    pub expected_version: u64,
    /// The new state.
    pub state: Value,
}

/// Applies a JSON Merge Patch to an execution's state.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchState {
    /// The execution.
    pub id: String,
    /// The patch (RFC 7396).
    pub patch: Value,
}

/// Pushes a value to an array member of an execution's state (created when absent).
#[derive(Debug, Clone, PartialEq)]
pub struct AppendToArray {
    /// The execution.
    pub id: String,
    /// The member.
    pub key: String,
    /// The value to push.
    pub value: Value,
}

/// Appends an event to an execution's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendEvent {
    /// The execution.
    pub id: String,
    /// The event's type.
    pub event_type: String,
    /// The event's data.
    pub payload: Value,
}

/// An execution's events after a sequence, at most `Limits::page_size_max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEvents {
    /// The execution.
    pub id: String,
    /// Events after this sequence.
    pub after_seq: u64,
}

/// Records an execution's state as of a sequence of its stream.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteSnapshot {
    /// The execution.
    pub id: String,
    /// The last event the state includes, at most the stream's head.
    pub at_seq: u64,
    /// The state.
    pub state: Value,
}

/// The snapshot at the highest sequence, or `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestSnapshot {
    /// The execution.
    pub id: String,
}

/// The execution, its latest snapshot and its stream's head, read together: where
/// [`Workflows::load`](super::Workflows::load) starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadStart {
    /// The execution.
    pub id: String,
}

/// Deletes an execution with its snapshots and its event stream; output whether it existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteExecution {
    /// The execution.
    pub id: String,
}

impl Sealed for PutDefinition {}
impl Op for PutDefinition {
    type Output = Definition;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.ir)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Definition> {
        check_workflow(tx, &self.workflow_id, &self.version)?;
        tx.limits().check_json("workflow definition bytes", &self.ir)?;
        let hash = content_hash(&self.ir);
        let found = sql::select_definition(tx.db(), tx.tenant(), &self.workflow_id, &self.version)?;
        if let Some((existing, existing_hash)) = found {
            if existing_hash != hash {
                return Err(Error::Conflict(format!(
                    "workflow {} version {} is defined with other content",
                    self.workflow_id, self.version
                )));
            }
            return Ok(existing);
        }
        let definition = Definition {
            workflow_id: self.workflow_id,
            version: self.version,
            ir: self.ir,
            created_at_ms: tx.now_ms(),
        };
        let def_seq = sql::next_def_seq(tx.db(), tx.tenant(), &definition.workflow_id)?;
        sql::insert_definition(tx.db(), tx.tenant(), &definition, &hash, def_seq)?;
        Ok(definition)
    }
}

impl Sealed for GetDefinition {}
impl Op for GetDefinition {
    type Output = Option<Definition>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Definition>> {
        check_workflow(tx, &self.workflow_id, &self.version)?;
        let found = sql::select_definition(tx.db(), tx.tenant(), &self.workflow_id, &self.version)?;
        Ok(found.map(|(definition, _)| definition))
    }
}

impl Sealed for LatestDefinition {}
impl Op for LatestDefinition {
    type Output = Option<Definition>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Definition>> {
        tx.limits().check_id("workflow id", &self.workflow_id)?;
        sql::select_latest_definition(tx.db(), tx.tenant(), &self.workflow_id)
    }
}

impl Sealed for Versions {}
impl Op for Versions {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        tx.limits().check_id("workflow id", &self.workflow_id)?;
        let limit = tx.limits().page_size_max;
        sql::select_versions(tx.db(), tx.tenant(), &self.workflow_id, limit)
    }
}

impl Sealed for CreateExecution {}
impl Op for CreateExecution {
    type Output = Execution;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.input)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Execution> {
        check_workflow(tx, &self.workflow_id, &self.version)?;
        tx.limits().check_json("execution input bytes", &self.input)?;
        if sql::select_definition(tx.db(), tx.tenant(), &self.workflow_id, &self.version)?.is_none()
        {
            let id = format!("{}@{}", self.workflow_id, self.version);
            return Err(Error::not_found("workflow definition", &id));
        }
        let now_ms = tx.now_ms();
        let execution = Execution {
            id: tx.new_id(),
            workflow_id: self.workflow_id,
            workflow_version: self.version,
            status: WorkflowStatus::Pending,
            input: self.input,
            state: json!({}),
            state_version: 0,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            completed_at_ms: None,
        };
        sql::insert_execution(tx.db(), tx.tenant(), &execution)?;
        Ok(execution)
    }
}

impl Sealed for GetExecution {}
impl Op for GetExecution {
    type Output = Option<Execution>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Execution>> {
        tx.limits().check_id("execution id", &self.id)?;
        sql::select_execution(tx.db(), tx.tenant(), &self.id)
    }
}

impl Sealed for ListExecutions {}
impl Op for ListExecutions {
    type Output = Vec<Execution>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Execution>> {
        tx.limits().check_page(self.page.limit)?;
        if let Some(workflow_id) = &self.filter.workflow_id {
            tx.limits().check_id("workflow id", workflow_id)?;
        }
        sql::list_executions(tx.db(), tx.tenant(), &self.filter, &self.page)
    }
}

impl Sealed for CountExecutions {}
impl Op for CountExecutions {
    type Output = Vec<(WorkflowStatus, u64)>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<(WorkflowStatus, u64)>> {
        sql::count_executions(tx.db(), tx.tenant())
    }
}

impl Sealed for AuditCounts {}
impl Op for AuditCounts {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        let [kept, counted] = sql::select_counts_and_recount(tx.db(), tx.tenant())?;
        Ok(counts::differences(kept, counted))
    }
}

impl Sealed for SetStatus {}
impl Op for SetStatus {
    type Output = Execution;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Execution> {
        let mut execution = execution(tx, &self.id)?;
        let (from, to) = (execution.status, self.status);
        if !from.can_become(to) {
            return Err(Error::Conflict(format!(
                "execution {} cannot move from {} to {}",
                execution.id,
                from.as_str(),
                to.as_str()
            )));
        }
        execution.status = to;
        execution.updated_at_ms = tx.now_ms();
        execution.completed_at_ms = to.is_terminal().then_some(tx.now_ms());
        sql::update_status(tx.db(), tx.tenant(), &execution, from)?;
        let payload = json!({
            "from": from.as_str(),
            "to": to.as_str(),
            "workflow_id": execution.workflow_id,
            "workflow_version": execution.workflow_version,
        });
        events::append(tx, &stream_of(&execution.id), lifecycle_event(from, to), payload, None)?;
        Ok(execution)
    }
}

/// The lifecycle event a status move appends.
fn lifecycle_event(from: WorkflowStatus, to: WorkflowStatus) -> &'static str {
    match (from, to) {
        (WorkflowStatus::Paused, WorkflowStatus::Running) => "workflow.resumed",
        (_, WorkflowStatus::Running) => "workflow.started",
        (_, WorkflowStatus::Paused) => "workflow.paused",
        (_, WorkflowStatus::Completed) => "workflow.completed",
        (_, WorkflowStatus::Failed) => "workflow.failed",
        (_, WorkflowStatus::Cancelled) => "workflow.cancelled",
        (_, WorkflowStatus::LimitExceeded) => "workflow.limit_exceeded",
        (_, WorkflowStatus::Pending) => "workflow.pending",
    }
}

impl Sealed for SetState {}
impl Op for SetState {
    type Output = Execution;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.state)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Execution> {
        let current = execution(tx, &self.id)?;
        if current.state_version != self.expected_version {
            return Err(stale_version(&current, self.expected_version));
        }
        save_state(tx, current, self.state)
    }
}

impl Sealed for PatchState {}
impl Op for PatchState {
    type Output = Execution;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.patch)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Execution> {
        tx.limits().check_json("state patch bytes", &self.patch)?;
        let current = execution(tx, &self.id)?;
        let mut state = current.state.clone();
        merge_patch(&mut state, &self.patch);
        save_state(tx, current, state)
    }
}

impl Sealed for AppendToArray {}
impl Op for AppendToArray {
    type Output = Execution;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.value)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Execution> {
        tx.limits().check_id("state key", &self.key)?;
        let current = execution(tx, &self.id)?;
        let mut state = current.state.clone();
        let Some(fields) = state.as_object_mut() else {
            return Err(Error::InvalidInput(format!(
                "execution {} state is not an object",
                self.id
            )));
        };
        let member = fields.entry(self.key.clone()).or_insert_with(|| json!([]));
        let Some(items) = member.as_array_mut() else {
            return Err(Error::InvalidInput(format!(
                "execution {} state member {:?} is not an array",
                self.id, self.key
            )));
        };
        items.push(self.value);
        save_state(tx, current, state)
    }
}

/// Writes `state` as the next version of `current`'s state.
fn save_state(tx: &Tx<'_>, current: Execution, state: Value) -> Result<Execution> {
    check_running(&current.id, current.status)?;
    tx.limits().check_json("execution state bytes", &state)?;
    let expected_version = current.state_version;
    let next = Execution {
        state,
        state_version: expected_version + 1,
        updated_at_ms: tx.now_ms(),
        ..current
    };
    if !sql::update_state(tx.db(), tx.tenant(), &next, expected_version)? {
        return Err(stale_version(&next, expected_version));
    }
    Ok(next)
}

fn stale_version(execution: &Execution, expected_version: u64) -> Error {
    Error::Conflict(format!(
        "execution {} state is not at version {expected_version} any more",
        execution.id
    ))
}

impl Sealed for AppendEvent {}
impl Op for AppendEvent {
    type Output = Appended;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.payload)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Appended> {
        if self.event_type.starts_with(LIFECYCLE_PREFIX) {
            return Err(Error::InvalidInput(format!(
                "event types starting {LIFECYCLE_PREFIX:?} are the store's own lifecycle events"
            )));
        }
        check_running(&self.id, status_of(tx, &self.id)?)?;
        events::append(tx, &stream_of(&self.id), &self.event_type, self.payload, None)
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for ReadEvents {}
impl Op for ReadEvents {
    type Output = Vec<Event>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Event>> {
        status_of(tx, &self.id)?;
        let limit = tx.limits().page_size_max;
        events::read_stream(tx.db(), tx.tenant(), &stream_of(&self.id), self.after_seq, limit)
    }
}

impl Sealed for WriteSnapshot {}
impl Op for WriteSnapshot {
    type Output = Snapshot;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.state)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Snapshot> {
        status_of(tx, &self.id)?;
        let encoded = serde_json::to_string(&self.state)?;
        tx.limits().check_payload("snapshot state bytes", &encoded)?;
        let head = events::select_head(tx.db(), tx.tenant(), &stream_of(&self.id))?;
        if self.at_seq > head {
            return Err(Error::InvalidInput(format!(
                "a snapshot at {} is past the head {head} of execution {}",
                self.at_seq, self.id
            )));
        }
        let hash = content_hash(&self.state);
        if let Some((existing, existing_hash)) =
            sql::select_snapshot(tx.db(), tx.tenant(), &self.id, self.at_seq)?
        {
            if existing_hash != hash {
                return Err(Error::Conflict(format!(
                    "execution {} has another snapshot at {}",
                    self.id, self.at_seq
                )));
            }
            return Ok(existing);
        }
        let snapshot = Snapshot {
            execution_id: self.id,
            at_seq: self.at_seq,
            state: self.state,
            created_at_ms: tx.now_ms(),
        };
        sql::insert_snapshot(tx.db(), tx.tenant(), &snapshot, &encoded, &hash)?;
        Ok(snapshot)
    }
}

impl Sealed for LatestSnapshot {}
impl Op for LatestSnapshot {
    type Output = Option<Snapshot>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Snapshot>> {
        status_of(tx, &self.id)?;
        sql::select_latest_snapshot(tx.db(), tx.tenant(), &self.id)
    }
}

impl Sealed for LoadStart {}
impl Op for LoadStart {
    type Output = (Execution, Option<Snapshot>, u64);
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<(Execution, Option<Snapshot>, u64)> {
        let execution = execution(tx, &self.id)?;
        let snapshot = sql::select_latest_snapshot(tx.db(), tx.tenant(), &self.id)?;
        let head = events::select_head(tx.db(), tx.tenant(), &stream_of(&self.id))?;
        Ok((execution, snapshot, head))
    }
}

impl Sealed for DeleteExecution {}
impl Op for DeleteExecution {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        tx.limits().check_id("execution id", &self.id)?;
        if !sql::delete_execution(tx.db(), tx.tenant(), &self.id)? {
            return Ok(false);
        }
        events::delete_stream(tx.db(), tx.tenant(), &stream_of(&self.id))?;
        Ok(true)
    }
}

/// The prefix of the lifecycle events the status moves append; callers' events may not use it.
const LIFECYCLE_PREFIX: &str = "workflow.";

/// `Conflict` for a finished execution: its state and its events are final.
fn check_running(id: &str, status: WorkflowStatus) -> Result<()> {
    if status.is_terminal() {
        return Err(Error::Conflict(format!(
            "execution {id} has finished ({}): its state and events are final",
            status.as_str()
        )));
    }
    Ok(())
}

/// The execution's status, or `NotFound` (without reading its input and state).
fn status_of(tx: &Tx<'_>, id: &str) -> Result<WorkflowStatus> {
    tx.limits().check_id("execution id", id)?;
    sql::select_status(tx.db(), tx.tenant(), id)?.ok_or_else(|| Error::not_found("execution", id))
}

/// The execution, or `NotFound`.
fn execution(tx: &Tx<'_>, id: &str) -> Result<Execution> {
    tx.limits().check_id("execution id", id)?;
    sql::select_execution(tx.db(), tx.tenant(), id)?
        .ok_or_else(|| Error::not_found("execution", id))
}

fn check_workflow(tx: &Tx<'_>, workflow_id: &str, version: &str) -> Result<()> {
    tx.limits().check_id("workflow id", workflow_id)?;
    tx.limits().check_id("workflow version", version)
}
