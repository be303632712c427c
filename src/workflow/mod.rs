//! Workflows: immutable definitions, executions with a status machine and a compare-and-set
//! state, an event log per execution, and snapshots to load it fast.
//!
//! A definition `(workflow_id, version) -> ir` is put once: the same content again changes
//! nothing, other content is `Conflict`. An execution of a definition starts `Pending` with
//! its input and an empty state (`{}`); its status moves only along
//! Pending→Running; Running→{Paused, Completed, Failed, Cancelled, LimitExceeded};
//! Paused→{Running, Cancelled} (anything else is `Conflict`), and each move appends a
//! lifecycle event (`workflow.started`, `.paused`, `.resumed`, `.completed`, `.failed`,
//! `.cancelled`, `.limit_exceeded`) to `Stream::execution(id)`, beside the caller's own
//! events (which may not use the `workflow.` prefix), so a subscriber sees every move in
//! order. The stream is the execution's: the event log refuses callers' appends and
//! truncations on it, and it is deleted with the execution. A finished execution's state and
//! events are final (`Conflict`); snapshots may still be written. The state changes atomically: `set_state`
//! is a compare-and-set on `state_version`, `patch_state` applies a JSON Merge Patch and
//! `append_to_array` pushes to an array member, each in one operation. A snapshot records the
//! state at a sequence of the stream; `load` returns the latest snapshot and the events after
//! it, `replay` folds them.
//!
//! Ops live in `ops.rs`, SQL in `sql.rs`, the merge patch in `patch.rs`; the facade is
//! [`Workflows`], reached with `store.workflows()`.

mod ops;
mod patch;
mod sql;

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::db::Db;
use crate::core::events::{Event, Stream};
use crate::error::Result;
use crate::page::Page;
use crate::store::Store;

pub use ops::{
    AppendEvent, AppendToArray, AuditCounts, CountExecutions, CreateExecution, DeleteExecution,
    GetDefinition, GetExecution, LatestDefinition, LatestSnapshot, ListExecutions, LoadStart,
    PatchState, PutDefinition, ReadEvents, SetState, SetStatus, Versions, WriteSnapshot,
};

/// An execution's id (a UUID v7).
pub type ExecutionId = String;

/// Where an execution is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WorkflowStatus {
    /// Created, not started.
    Pending,
    /// Running.
    Running,
    /// Paused; may run again or be cancelled.
    Paused,
    /// Finished well.
    Completed,
    /// Finished badly.
    Failed,
    /// Stopped by a caller.
    Cancelled,
    /// Stopped by a limit (budget, iterations).
    LimitExceeded,
}

impl WorkflowStatus {
    /// The status as stored: `pending`, `running`, ... `limit_exceeded`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowStatus::Pending => "pending",
            WorkflowStatus::Running => "running",
            WorkflowStatus::Paused => "paused",
            WorkflowStatus::Completed => "completed",
            WorkflowStatus::Failed => "failed",
            WorkflowStatus::Cancelled => "cancelled",
            WorkflowStatus::LimitExceeded => "limit_exceeded",
        }
    }

    /// Whether the execution has finished.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WorkflowStatus::Completed
                | WorkflowStatus::Failed
                | WorkflowStatus::Cancelled
                | WorkflowStatus::LimitExceeded
        )
    }

    /// Whether an execution may move from this status to `next`.
    pub fn can_become(self, next: WorkflowStatus) -> bool {
        use WorkflowStatus::{
            Cancelled, Completed, Failed, LimitExceeded, Paused, Pending, Running,
        };
        matches!(
            (self, next),
            (Pending, Running)
                | (Running, Paused | Completed | Failed | Cancelled | LimitExceeded)
                | (Paused, Running | Cancelled)
        )
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        let all = [
            WorkflowStatus::Pending,
            WorkflowStatus::Running,
            WorkflowStatus::Paused,
            WorkflowStatus::Completed,
            WorkflowStatus::Failed,
            WorkflowStatus::Cancelled,
            WorkflowStatus::LimitExceeded,
        ];
        all.into_iter().find(|status| status.as_str() == text)
    }
}

/// A workflow definition: its intermediate representation, opaque to the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Definition {
    /// The workflow.
    pub workflow_id: String,
    /// This version's name.
    pub version: String,
    /// The definition itself.
    pub ir: Value,
    /// When it was put, in epoch milliseconds.
    pub created_at_ms: i64,
}

/// A run of a workflow definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The execution's id.
    pub id: ExecutionId,
    /// The workflow it runs.
    pub workflow_id: String,
    /// The version it runs.
    pub workflow_version: String,
    /// Where it is in its life.
    pub status: WorkflowStatus,
    /// What it was started with.
    pub input: Value,
    /// Its current state (starts as `{}`).
    pub state: Value,
    /// Grows by one at every change of state; `set_state` compares it.
    pub state_version: u64,
    /// When it was created, in epoch milliseconds.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
    /// When it finished.
    pub completed_at_ms: Option<i64>,
}

/// Which executions a listing shows (newest first). `#[non_exhaustive]`: start from
/// `ExecutionFilter::default()` (every execution) and chain the setters,
/// `ExecutionFilter::default().status(WorkflowStatus::Running).workflow_id("build")`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ExecutionFilter {
    /// Only this status.
    pub status: Option<WorkflowStatus>,
    /// Only this workflow.
    pub workflow_id: Option<String>,
}

impl ExecutionFilter {
    /// Only executions with `status`.
    #[must_use]
    pub fn status(mut self, status: WorkflowStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only executions of the workflow `workflow_id`.
    #[must_use]
    pub fn workflow_id(mut self, workflow_id: impl Into<String>) -> Self {
        self.workflow_id = Some(workflow_id.into());
        self
    }
}

/// An execution's state at a sequence of its event stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The last event the state includes (0: none).
    pub at_seq: u64,
    /// The state.
    pub state: Value,
    /// When it was written, in epoch milliseconds.
    pub created_at_ms: i64,
}

/// An execution ready to resume: its latest snapshot and every event after it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Loaded {
    /// The execution as it is.
    pub execution: Execution,
    /// The latest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The events after the snapshot (after 0 without one), oldest first.
    pub events: Vec<Event>,
}

/// Whether `stream` is the stream of an existing execution of `tenant`: only its workflow
/// writes it (registered with the engine in `crate::domains`).
pub(crate) fn owns_stream(
    db: Db<'_>,
    tenant: &str,
    stream: &crate::core::events::Stream,
) -> Result<bool> {
    if stream.kind() != crate::core::events::StreamKind::Execution {
        return Ok(false);
    }
    Ok(sql::select_status(db, tenant, stream.id())?.is_some())
}

/// The workflows of a store view: `store.workflows()`.
#[derive(Debug, Clone, Copy)]
pub struct Workflows<'a> {
    store: &'a Store,
}

impl<'a> Workflows<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// Puts a definition; the same content again returns it unchanged.
    ///
    /// # Errors
    /// `Conflict` when the version exists with other content; `InvalidInput`/`TooLarge` for
    /// bad ids or an `ir` past the payload limit.
    pub fn put_definition(
        &self,
        workflow_id: &str,
        version: &str,
        ir: Value,
    ) -> Result<Definition> {
        let op = PutDefinition { workflow_id: workflow_id.into(), version: version.into(), ir };
        self.store.exec(op)
    }

    /// One version of a definition, or `None`.
    ///
    /// # Errors
    /// `InvalidInput` for bad ids.
    pub fn definition(&self, workflow_id: &str, version: &str) -> Result<Option<Definition>> {
        self.store.exec(GetDefinition { workflow_id: workflow_id.into(), version: version.into() })
    }

    /// The version put last, or `None`.
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn latest_definition(&self, workflow_id: &str) -> Result<Option<Definition>> {
        self.store.exec(LatestDefinition { workflow_id: workflow_id.into() })
    }

    /// The workflow's versions in the order they were put (at most `Limits::page_size_max`).
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn versions(&self, workflow_id: &str) -> Result<Vec<String>> {
        self.store.exec(Versions { workflow_id: workflow_id.into() })
    }

    /// Creates a pending execution of a definition with `input`.
    ///
    /// # Errors
    /// `NotFound` when the definition does not exist; `TooLarge` for an input past the limit.
    pub fn create_execution(
        &self,
        workflow_id: &str,
        version: &str,
        input: Value,
    ) -> Result<Execution> {
        let op =
            CreateExecution { workflow_id: workflow_id.into(), version: version.into(), input };
        self.store.exec(op)
    }

    /// One execution, or `None` (also for another tenant's).
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn execution(&self, id: &str) -> Result<Option<Execution>> {
        self.store.exec(GetExecution { id: id.into() })
    }

    /// A page of executions matching `filter`, newest first (page on with the last id).
    ///
    /// # Errors
    /// `TooLarge` for a page past `Limits::page_size_max`.
    pub fn list_executions(
        &self,
        filter: impl Borrow<ExecutionFilter>,
        page: Page,
    ) -> Result<Vec<Execution>> {
        self.store.exec(ListExecutions { filter: filter.borrow().clone(), page })
    }

    /// How many of the tenant's executions are in each status; a status none is in is left out.
    /// Read from counts kept as executions are created, change status and are deleted: it
    /// reads no execution.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn count_by_status(&self) -> Result<Vec<(WorkflowStatus, u64)>> {
        self.store.exec(CountExecutions)
    }

    /// Where the tenant's kept execution counts (what [`Workflows::count_by_status`] reads)
    /// differ from a recount of its executions, one line each; empty when they agree, as they
    /// always should (`spindle check` reports any line). It reads every execution of the
    /// tenant.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn audit_counts(&self) -> Result<Vec<String>> {
        self.store.exec(AuditCounts)
    }

    /// Moves the execution to `status` and appends the lifecycle event.
    ///
    /// # Errors
    /// `NotFound`; `Conflict` for a move the status machine does not allow.
    pub fn set_status(&self, id: &str, status: WorkflowStatus) -> Result<Execution> {
        self.store.exec(SetStatus { id: id.into(), status })
    }

    /// Replaces the state if its version is still `expected_version`.
    ///
    /// # Errors
    /// `NotFound`; `Conflict` when the version has moved; `TooLarge` past the payload limit.
    pub fn set_state(&self, id: &str, expected_version: u64, state: Value) -> Result<Execution> {
        self.store.exec(SetState { id: id.into(), expected_version, state })
    }

    /// Applies a JSON Merge Patch (RFC 7396) to the state, atomically.
    ///
    /// # Errors
    /// `NotFound`; `TooLarge` when the patched state passes the payload limit.
    pub fn patch_state(&self, id: &str, patch: Value) -> Result<Execution> {
        self.store.exec(PatchState { id: id.into(), patch })
    }

    /// Pushes `value` to the state's array member `key` (created when absent), atomically.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` when the state is not an object or `key` is not an array;
    /// `TooLarge` past the payload limit.
    pub fn append_to_array(&self, id: &str, key: &str, value: Value) -> Result<Execution> {
        self.store.exec(AppendToArray { id: id.into(), key: key.into(), value })
    }

    /// Appends an event to the execution's stream.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput`/`TooLarge` for a bad type or payload.
    pub fn append_event(
        &self,
        id: &str,
        event_type: &str,
        payload: Value,
    ) -> Result<crate::core::events::Appended> {
        let op = AppendEvent { id: id.into(), event_type: event_type.into(), payload };
        self.store.exec(op)
    }

    /// The execution's events after `after_seq`, oldest first, at most `Limits::page_size_max`.
    ///
    /// # Errors
    /// `NotFound` for an unknown execution.
    pub fn events(&self, id: &str, after_seq: u64) -> Result<Vec<Event>> {
        self.store.exec(ReadEvents { id: id.into(), after_seq })
    }

    /// Records the state as of event `at_seq` (at most the stream's head). The same snapshot
    /// again changes nothing.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` past the head; `Conflict` for another state at that sequence.
    pub fn write_snapshot(&self, id: &str, at_seq: u64, state: Value) -> Result<Snapshot> {
        self.store.exec(WriteSnapshot { id: id.into(), at_seq, state })
    }

    /// The snapshot at the highest sequence, or `None`.
    ///
    /// # Errors
    /// `NotFound` for an unknown execution.
    pub fn latest_snapshot(&self, id: &str) -> Result<Option<Snapshot>> {
        self.store.exec(LatestSnapshot { id: id.into() })
    }

    /// The execution, its latest snapshot and every event after it (read a page per
    /// operation, up to the head seen with the snapshot; all of them held in memory: keep
    /// streams short with snapshots, or fold them with `replay`).
    ///
    /// # Errors
    /// `NotFound` for an unknown execution.
    pub fn load(&self, id: &str) -> Result<Loaded> {
        let (execution, snapshot, head) = self.store.exec(LoadStart { id: id.into() })?;
        let mut events: Vec<Event> = Vec::new();
        let mut after = snapshot.as_ref().map_or(0, |snapshot| snapshot.at_seq);
        while after < head {
            let page = self.events(id, after)?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            events.extend(page.into_iter().filter(|event| event.seq <= head));
        }
        Ok(Loaded { execution, snapshot, events })
    }

    /// Folds the events after the latest snapshot into its state (or into `init` without one),
    /// a page of events at a time.
    ///
    /// # Errors
    /// As `load`.
    pub fn replay(
        &self,
        id: &str,
        init: Value,
        mut reducer: impl FnMut(Value, &Event) -> Value,
    ) -> Result<Value> {
        let (_, snapshot, head) = self.store.exec(LoadStart { id: id.into() })?;
        let mut after = snapshot.as_ref().map_or(0, |snapshot| snapshot.at_seq);
        let mut state = snapshot.map_or(init, |snapshot| snapshot.state);
        while after < head {
            let page = self.events(id, after)?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            state = page.iter().filter(|event| event.seq <= head).fold(state, &mut reducer);
        }
        Ok(state)
    }

    /// Deletes the execution with its snapshots and its event stream; whether it existed.
    /// Queue items linked to it are not touched (`queue().cancel_execution`).
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn delete_execution(&self, id: &str) -> Result<bool> {
        self.store.exec(DeleteExecution { id: id.into() })
    }
}

/// The event stream of an execution.
fn stream_of(id: &str) -> Stream {
    Stream::execution(id)
}

impl Store {
    /// Workflows: definitions, executions with their state and events, snapshots.
    pub fn workflows(&self) -> Workflows<'_> {
        Workflows::new(self)
    }
}
