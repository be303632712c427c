//! The process registry's data: registrations, records, event types and their semantics,
//! events, wakes, handle grants, filters and leases.
//!
//! Every type serializes with serde in the shape it is stored in; a registration's hash is the
//! canonical JSON of its prepared form, so the field names here are part of that hash.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::page::Page;
use crate::setters::setters;

/// Who a session-scoped grant or wake belongs to: a session, optionally one agent frame of it.
/// `#[non_exhaustive]`: build it with [`SessionScope::new`] or [`SessionScope::for_agent_frame`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionScope {
    /// The session (an id without `/`, so that scope ids cannot collide).
    pub session_id: String,
    /// The agent frame within the session; an empty frame id means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_frame_id: Option<String>,
}

impl SessionScope {
    /// The whole session.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self { session_id: session_id.into(), agent_frame_id: None }
    }

    /// One agent frame of a session.
    pub fn for_agent_frame(session_id: impl Into<String>, frame_id: impl Into<String>) -> Self {
        Self { session_id: session_id.into(), agent_frame_id: Some(frame_id.into()) }
    }

    /// The scope's id: `session:<id>` or `session:<id>/frame:<frame>`.
    pub fn id(&self) -> String {
        match self.agent_frame_id.as_deref() {
            Some(frame) if !frame.is_empty() => {
                format!("session:{}/frame:{frame}", self.session_id)
            }
            _ => format!("session:{}", self.session_id),
        }
    }
}

/// Who started a process.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Originator {
    /// The host application.
    #[default]
    Host,
    /// A session.
    Session {
        /// The session scope that started it.
        scope: SessionScope,
    },
}

impl Originator {
    /// `host`, or the session scope's id.
    pub fn scope_id(&self) -> String {
        match self {
            Originator::Host => "host".to_owned(),
            Originator::Session { scope } => scope.id(),
        }
    }
}

/// What a process is, for listings and filters. `#[non_exhaustive]`: build it with
/// [`Identity::new`] and the setters (a [`Registration`] sets its own through its setters).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Identity {
    /// Its kind (`tool`, `engine`, ...), chosen by the caller.
    pub kind: String,
    /// A short human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The definition it runs, if any; `ListFilter::definition` matches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

impl Identity {
    /// A process of `kind`, with no label or definition.
    pub fn new(kind: impl Into<String>) -> Self {
        Self { kind: kind.into(), label: None, definition: None }
    }

    /// Sets the label.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the definition.
    #[must_use]
    pub fn definition(mut self, definition: Value) -> Self {
        self.definition = Some(definition);
        self
    }
}

/// A process to register. Registering the same content again returns the first record;
/// different content under the same id is `Conflict`. `#[non_exhaustive]`: build it with
/// [`Registration::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Registration {
    /// The process id, chosen by the caller.
    pub id: String,
    /// What the process was started with (opaque to the store).
    pub input: Value,
    /// What it is.
    pub identity: Identity,
    /// The event types it may emit. The six default types are appended when missing.
    #[serde(default)]
    pub event_types: Vec<EventType>,
    /// Who started it.
    pub originator: Originator,
    /// What caused it (opaque to the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<Value>,
    /// A reference to its execution environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_ref: Option<String>,
    /// The session its wake-ups go to, unless an append names another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_target: Option<SessionScope>,
}

impl Registration {
    /// A process of `kind` started by the host with `input` and the default event types.
    pub fn new(id: impl Into<String>, kind: impl Into<String>, input: Value) -> Self {
        Self {
            id: id.into(),
            input,
            identity: Identity { kind: kind.into(), label: None, definition: None },
            event_types: Vec::new(),
            originator: Originator::Host,
            caused_by: None,
            env_ref: None,
            wake_target: None,
        }
    }

    /// Sets the label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.identity.label = Some(label.into());
        self
    }

    /// Sets the definition.
    pub fn definition(mut self, definition: Value) -> Self {
        self.identity.definition = Some(definition);
        self
    }

    /// Sets who started it.
    pub fn originator(mut self, originator: Originator) -> Self {
        self.originator = originator;
        self
    }

    /// Sets what caused it.
    pub fn caused_by(mut self, cause: Value) -> Self {
        self.caused_by = Some(cause);
        self
    }

    /// Sets the execution environment reference.
    pub fn env_ref(mut self, env_ref: impl Into<String>) -> Self {
        self.env_ref = Some(env_ref.into());
        self
    }

    /// Sets the session its wake-ups go to.
    pub fn wake_target(mut self, scope: SessionScope) -> Self {
        self.wake_target = Some(scope);
        self
    }

    /// Replaces the declared event types (the defaults are still appended when missing).
    pub fn event_types(mut self, event_types: Vec<EventType>) -> Self {
        self.event_types = event_types;
        self
    }

    /// Declares one more event type.
    pub fn event_type(mut self, event_type: EventType) -> Self {
        self.event_types.push(event_type);
        self
    }
}

/// An event type a process declares: its name, the schema its payloads must meet, and what
/// its events mean (end the process, wake a session). `#[non_exhaustive]`: build it with
/// [`EventType::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventType {
    /// The event type's name.
    pub name: String,
    /// A JSON Schema (a subset: types, enum, const, anyOf/oneOf/allOf/not, properties,
    /// required, additionalProperties, items, lengths, bounds); `{}` accepts anything.
    pub payload_schema: Value,
    /// What its events mean.
    #[serde(default)]
    pub semantics: SemanticsSpec,
}

impl EventType {
    /// An event type accepting any payload, with no semantics.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            payload_schema: Value::Object(Default::default()),
            semantics: SemanticsSpec::default(),
        }
    }

    /// Sets the payload schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.payload_schema = schema;
        self
    }

    /// Makes its events end the process.
    pub fn terminal(mut self, spec: TerminalSpec) -> Self {
        self.semantics.terminal = Some(spec);
        self
    }

    /// Makes its events wake the process's session.
    pub fn wake(mut self, spec: WakeSpec) -> Self {
        self.semantics.wake = Some(spec);
        self
    }
}

/// What an event type's events mean. `#[non_exhaustive]`: start from `Default` (nothing) and
/// chain the setters, or set them through [`EventType::terminal`] and [`EventType::wake`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SemanticsSpec {
    /// Its events end the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalSpec>,
    /// Its events wake a session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakeSpec>,
}

impl SemanticsSpec {
    /// Its events end the process.
    #[must_use]
    pub fn terminal(mut self, spec: TerminalSpec) -> Self {
        self.terminal = Some(spec);
        self
    }

    /// Its events wake a session.
    #[must_use]
    pub fn wake(mut self, spec: WakeSpec) -> Self {
        self.wake = Some(spec);
        self
    }
}

/// How an event ends its process. `#[non_exhaustive]`: build it with [`TerminalSpec::new`]
/// and [`TerminalSpec::await_output`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TerminalSpec {
    /// The state it ends in.
    pub state: TerminalState,
    /// Where the output awaited by callers is in the payload; required unless `Completed`
    /// (a completion without one awaits the whole payload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub await_output: Option<Selector>,
}

impl TerminalSpec {
    /// Its events end the process in `state`, with no output selected (a completion awaits
    /// the whole payload).
    pub fn new(state: TerminalState) -> Self {
        Self { state, await_output: None }
    }

    /// Where the output awaited by callers is in the payload.
    #[must_use]
    pub fn await_output(mut self, selector: Selector) -> Self {
        self.await_output = Some(selector);
        self
    }
}

/// How an event wakes a session. `#[non_exhaustive]`: build it with [`WakeSpec::new`] and the
/// setters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WakeSpec {
    /// Wake only when this selects a truthy value (not null, false, "", [] or {}).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Selector>,
    /// The wake's input text (a selected string as is, any other value as JSON).
    pub input: Selector,
    /// What makes two wakes the same one.
    #[serde(default)]
    pub dedupe_key: DedupeKey,
}

impl WakeSpec {
    /// Every event wakes, with the text `input` selects, one wake per event
    /// ([`DedupeKey::EventIdentity`]).
    pub fn new(input: Selector) -> Self {
        Self { when: None, input, dedupe_key: DedupeKey::EventIdentity }
    }

    /// Wakes only when `selector` selects a truthy value.
    #[must_use]
    pub fn when(mut self, selector: Selector) -> Self {
        self.when = Some(selector);
        self
    }

    /// Sets what makes two wakes the same one.
    #[must_use]
    pub fn dedupe_key(mut self, key: DedupeKey) -> Self {
        self.dedupe_key = key;
        self
    }
}

/// What makes two wakes the same one: their id is a hash of the target scope and this key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DedupeKey {
    /// The event itself: `<process id>:<seq>`.
    #[default]
    EventIdentity,
    /// A value selected from the payload.
    Selector(Selector),
    /// A constant.
    Const(String),
}

/// Picks a value out of an event's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Selector {
    /// The whole payload.
    Payload,
    /// The value at a JSON pointer; a pointer that matches nothing fails the append.
    Pointer(String),
    /// A constant.
    Const(Value),
    /// A string with `{name}` replaced by each field's selected value.
    Template {
        /// The text, with `{name}` placeholders.
        template: String,
        /// The value of each placeholder.
        fields: BTreeMap<String, Selector>,
    },
    /// Whether a JSON pointer matches something (a boolean).
    Present(String),
}

/// The state a terminal event ends its process in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TerminalState {
    /// It succeeded.
    Completed,
    /// It failed.
    Failed,
    /// It was cancelled.
    Cancelled,
}

impl TerminalState {
    /// The default event type that ends a process in this state.
    pub fn event_type(self) -> &'static str {
        match self {
            TerminalState::Completed => "process.completed",
            TerminalState::Failed => "process.failed",
            TerminalState::Cancelled => "process.cancelled",
        }
    }
}

/// What a finished process leaves for those awaiting it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AwaitOutput {
    /// It succeeded with a value.
    Success {
        /// The value.
        value: Value,
        /// Control data for the awaiting side.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        control: Option<Value>,
    },
    /// It failed.
    Failure {
        /// The failure's class (`execution`, ...).
        class: String,
        /// A machine-readable code.
        code: String,
        /// What went wrong.
        message: String,
        /// The raw value it failed with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw: Option<Value>,
        /// Control data for the awaiting side.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        control: Option<Value>,
    },
    /// It was cancelled.
    Cancelled {
        /// Why.
        message: String,
        /// The raw value it was cancelled with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw: Option<Value>,
        /// Control data for the awaiting side.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        control: Option<Value>,
    },
}

impl AwaitOutput {
    /// The state this output ends a process in.
    pub fn terminal_state(&self) -> TerminalState {
        match self {
            AwaitOutput::Success { .. } => TerminalState::Completed,
            AwaitOutput::Failure { .. } => TerminalState::Failed,
            AwaitOutput::Cancelled { .. } => TerminalState::Cancelled,
        }
    }
}

/// Where a process is in its life.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProcessStatus {
    /// Not finished (waiting processes are running too).
    #[default]
    Running,
    /// Succeeded.
    Completed {
        /// What it left.
        await_output: AwaitOutput,
    },
    /// Failed.
    Failed {
        /// What it left.
        await_output: AwaitOutput,
    },
    /// Cancelled.
    Cancelled {
        /// What it left.
        await_output: AwaitOutput,
    },
}

impl ProcessStatus {
    /// The status a terminal output ends a process in.
    pub fn from_output(await_output: AwaitOutput) -> Self {
        match await_output.terminal_state() {
            TerminalState::Completed => ProcessStatus::Completed { await_output },
            TerminalState::Failed => ProcessStatus::Failed { await_output },
            TerminalState::Cancelled => ProcessStatus::Cancelled { await_output },
        }
    }

    /// `running`, `completed`, `failed` or `cancelled`.
    pub fn label(&self) -> &'static str {
        match self {
            ProcessStatus::Running => "running",
            ProcessStatus::Completed { .. } => "completed",
            ProcessStatus::Failed { .. } => "failed",
            ProcessStatus::Cancelled { .. } => "cancelled",
        }
    }

    /// Whether the process has finished.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, ProcessStatus::Running)
    }

    /// The output of a finished process.
    pub fn await_output(&self) -> Option<&AwaitOutput> {
        match self {
            ProcessStatus::Running => None,
            ProcessStatus::Completed { await_output }
            | ProcessStatus::Failed { await_output }
            | ProcessStatus::Cancelled { await_output } => Some(await_output),
        }
    }
}

/// What a running process is waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitState {
    /// What it waits for.
    pub kind: WaitKind,
    /// Since when, in epoch milliseconds (the store's clock when it was set).
    pub since_ms: i64,
}

impl From<WaitState> for WaitKind {
    /// What the state waits for (its `since_ms` is the store's to set).
    fn from(state: WaitState) -> Self {
        state.kind
    }
}

/// What a process can wait for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitKind {
    /// A signal: an event of type `event_type` (by convention `signal.<name>`) keyed `key`.
    Signal {
        /// The signal's name: letters, digits, `_` and `-`.
        name: String,
        /// The event type that delivers it.
        event_type: String,
        /// The replay key the delivering event will carry.
        key: String,
        /// Which occurrence of the signal.
        ordinal: u64,
    },
}

/// Where a process lives in another system. Set once: the same value again is a no-op,
/// another is `Conflict`. `#[non_exhaustive]`: build it with [`ExternalRef::new`] and
/// [`ExternalRef::metadata`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExternalRef {
    /// The other system.
    pub backend: String,
    /// The process's id there.
    pub id: String,
    /// Anything else worth keeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl ExternalRef {
    /// The process is `id` in the system `backend`.
    pub fn new(backend: impl Into<String>, id: impl Into<String>) -> Self {
        Self { backend: backend.into(), id: id.into(), metadata: None }
    }

    /// Keeps `metadata` with the reference.
    #[must_use]
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// A registered process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessRecord {
    /// The process id.
    pub id: String,
    /// The hash of its prepared registration.
    pub registration_hash: String,
    /// What it was started with.
    pub input: Value,
    /// What it is.
    pub identity: Identity,
    /// The event types it may emit (the defaults included).
    pub event_types: Vec<EventType>,
    /// Who started it.
    pub originator: Originator,
    /// What caused it.
    pub caused_by: Option<Value>,
    /// Its execution environment reference.
    pub env_ref: Option<String>,
    /// The session its wake-ups go to (cleared when that session's state is deleted).
    pub wake_target: Option<SessionScope>,
    /// When it was registered, in epoch milliseconds.
    pub created_at_ms: i64,
    /// When it last changed (every event appended changes it).
    pub updated_at_ms: i64,
    /// Where it lives in another system.
    pub external_ref: Option<ExternalRef>,
    /// What it waits for (a terminal process waits for nothing).
    pub wait: Option<WaitState>,
    /// Where it is in its life.
    pub status: ProcessStatus,
}

impl ProcessRecord {
    /// A newly registered, running record.
    pub(crate) fn registered(registration: Registration, hash: String, now_ms: i64) -> Self {
        ProcessRecord {
            id: registration.id,
            registration_hash: hash,
            input: registration.input,
            identity: registration.identity,
            event_types: registration.event_types,
            originator: registration.originator,
            caused_by: registration.caused_by,
            env_ref: registration.env_ref,
            wake_target: registration.wake_target,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            external_ref: None,
            wait: None,
            status: ProcessStatus::Running,
        }
    }

    /// Whether it has finished.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }
}

/// How a session refers to a process it may address. `#[non_exhaustive]`: start from
/// `Default` (neither) and chain the setters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HandleDescriptor {
    /// What kind of handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A label for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl HandleDescriptor {
    /// Sets what kind of handle it is.
    #[must_use]
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets its label.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }
}

/// A session scope's right to address a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HandleGrant {
    /// The session holding it.
    pub session_id: String,
    /// The exact scope holding it (`SessionScope::id`).
    pub scope_id: String,
    /// The process.
    pub process_id: String,
    /// How the session refers to it.
    pub descriptor: HandleDescriptor,
}

/// What deleting a session's process state did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionDeleteReport {
    /// The session.
    pub session_id: String,
    /// Grants removed (every scope and frame of the session).
    pub revoked_handle_count: u64,
    /// Wake acknowledgements removed: always 0, removing them would bring consumed wakes back.
    pub deleted_wake_count: u64,
    /// Running processes that lost their last grant, sorted.
    pub orphaned_process_ids: Vec<String>,
    /// Running processes that lost this session's grant but are still granted elsewhere.
    pub preserved_process_ids: Vec<String>,
}

/// What pruning finished processes removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Processes removed.
    pub pruned_processes: u64,
    /// Their events removed.
    pub pruned_events: u64,
}

/// How many of a tenant's processes are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessCounts {
    /// Running and not waiting.
    pub running: u64,
    /// Running and waiting (a wait state is set).
    pub waiting: u64,
    /// Completed.
    pub completed: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

/// Which statuses a listing shows. The default is running processes only, as in the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StatusFilter {
    /// Running (waiting ones included).
    #[default]
    Running,
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Every status.
    Any,
}

/// Which processes a listing shows, in id order, one page at a time. `#[non_exhaustive]`:
/// start from `ListFilter::default()` (running processes) or [`ListFilter::status`] and chain
/// the setters, `ListFilter::status(StatusFilter::Any).waiting(true).page(Page::first(10))`.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only processes whose identity has this definition.
    pub definition: Option<Value>,
    /// Only these statuses (running by default).
    pub status: StatusFilter,
    /// Only waiting (`Some(true)`) or not waiting (`Some(false)`) processes.
    pub waiting: Option<bool>,
    /// Which page (keyset by process id).
    pub page: Page,
}

impl ListFilter {
    /// Every process of `status`, first page.
    pub fn status(status: StatusFilter) -> Self {
        Self { status, ..Self::default() }
    }

    /// Only processes whose identity has this definition.
    #[must_use]
    pub fn definition(mut self, definition: Value) -> Self {
        self.definition = Some(definition);
        self
    }

    /// Only waiting (`true`) or not waiting (`false`) processes.
    #[must_use]
    pub fn waiting(mut self, waiting: bool) -> Self {
        self.waiting = Some(waiting);
        self
    }

    /// Which page to read.
    #[must_use]
    pub fn page(mut self, page: Page) -> Self {
        self.page = page;
        self
    }
}

/// One event of a process, with what it meant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvent {
    /// The process.
    pub process_id: String,
    /// Its sequence in the process's stream, from 1.
    pub seq: u64,
    /// Its global position in the event log.
    pub position: u64,
    /// Its declared type.
    pub event_type: String,
    /// Its payload.
    pub payload: Value,
    /// The replay key it was appended with.
    pub replay_key: Option<String>,
    /// What it meant, as worked out when it was appended.
    pub semantics: EventSemantics,
    /// When it was appended, in epoch milliseconds.
    pub occurred_at_ms: i64,
}

/// What an appended event meant.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventSemantics {
    /// It ended the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalSemantics>,
    /// It wakes a session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<Wake>,
}

/// How an event ended its process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TerminalSemantics {
    /// The state.
    pub state: TerminalState,
    /// The output left for those awaiting it.
    pub await_output: AwaitOutput,
}

impl TerminalSemantics {
    /// How an event ends its process: in `state`, leaving `await_output` for those awaiting it.
    pub fn new(state: TerminalState, await_output: AwaitOutput) -> Self {
        Self { state, await_output }
    }
}

/// A wake an event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Wake {
    /// The wake's input text.
    pub input: String,
    /// What makes two wakes the same one.
    pub dedupe_key: String,
}

/// An event to append to a process. `#[non_exhaustive]`: build it with [`AppendRequest::new`]
/// and the setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AppendRequest {
    /// A declared event type.
    pub event_type: String,
    /// The payload; it must meet the type's schema.
    pub payload: Value,
    /// Makes the append idempotent (required for terminal and cancel-request events).
    pub replay_key: Option<String>,
    /// Where the wake goes, instead of the process's wake target.
    pub wake_target_scope: Option<SessionScope>,
}

impl AppendRequest {
    /// An event of `event_type` with `payload`.
    pub fn new(event_type: impl Into<String>, payload: Value) -> Self {
        Self { event_type: event_type.into(), payload, replay_key: None, wake_target_scope: None }
    }

    /// Makes it idempotent under `key`.
    pub fn replay_key(mut self, key: impl Into<String>) -> Self {
        self.replay_key = Some(key.into());
        self
    }

    /// Sends its wake to `scope`.
    pub fn wake_target_scope(mut self, scope: SessionScope) -> Self {
        self.wake_target_scope = Some(scope);
        self
    }

    /// A `process.cancel_requested` event with `{"reason": reason}`, keyed by its content so
    /// the same request twice is one event (keys are per process, so the id is not in it).
    pub fn cancel_requested(reason: &str) -> Self {
        let payload = serde_json::json!({ "reason": reason });
        let event_type = "process.cancel_requested";
        let hash = crate::hash::content_hash(&serde_json::json!([event_type, &payload]));
        // 128 bits of the content hash: keys are per process and must fit `id_len_max`.
        let key = format!("cancel:{}", hash.get(..32).unwrap_or(&hash));
        Self::new(event_type, payload).replay_key(key)
    }
}

/// What an append to a process did (the event log's own is `log::Appended`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Appended {
    /// The event (the first one, on a replay).
    pub event: ProcessEvent,
    /// The wake to deliver, when the event wakes and there is a target. It is not stored:
    /// delivering it is the caller's job (`wake_events_after` finds unacknowledged ones).
    pub wake: Option<WakeDelivery>,
    /// True when the replay key found the same event already there: nothing was appended (the
    /// record is written only to repair a status that does not show the end the event made).
    pub replayed: bool,
}

/// A wake for a session to act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WakeDelivery {
    /// `wake:<hash of target scope id and dedupe key>`: the same for duplicate wakes.
    pub wake_id: String,
    /// The session to wake.
    pub target_session_id: String,
    /// The exact scope to wake.
    pub target_scope_id: String,
    /// The process that woke it.
    pub process_id: String,
    /// The event's sequence.
    pub seq: u64,
    /// The event's type.
    pub event_type: String,
    /// What makes two wakes the same one.
    pub dedupe_key: String,
    /// The wake's input text.
    pub input: String,
    /// When the event was appended.
    pub created_at_ms: i64,
}

/// Who holds (or wants) a process lease: an owner, one incarnation of it, and how to tell
/// whether it is still alive. `#[non_exhaustive]`: build it with [`LeaseOwner::new`] and
/// [`LeaseOwner::liveness`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LeaseOwner {
    /// The owner.
    pub owner_id: String,
    /// This run of the owner; the same incarnation re-enters its own lease.
    pub incarnation_id: String,
    /// How to tell whether it is alive.
    #[serde(default)]
    pub liveness: Liveness,
}

impl LeaseOwner {
    /// An owner whose liveness cannot be checked.
    pub fn new(owner_id: impl Into<String>, incarnation_id: impl Into<String>) -> Self {
        Self {
            owner_id: owner_id.into(),
            incarnation_id: incarnation_id.into(),
            liveness: Liveness::Opaque,
        }
    }

    /// Sets how to tell whether it is alive.
    #[must_use]
    pub fn liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// Whether `other` is the same owner and incarnation (liveness is not compared).
    pub fn same_incarnation(&self, other: &LeaseOwner) -> bool {
        self.owner_id == other.owner_id && self.incarnation_id == other.incarnation_id
    }
}

/// How to tell whether a lease holder is alive.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Liveness {
    /// An operating-system process on a host: dead when, on the same host and boot, its pid
    /// is gone or belongs to a process started at another time.
    LocalProcess {
        /// The host.
        host_id: String,
        /// The host's boot (`/proc/sys/kernel/random/boot_id`).
        boot_id: String,
        /// The process id.
        pid: u32,
        /// The process's start time (field 22 of `/proc/<pid>/stat`).
        process_start: String,
    },
    /// Cannot be checked: never provably dead.
    #[default]
    Opaque,
}

/// A process lease: who holds it, its token, its fencing token and its expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessLease {
    /// The process.
    pub process_id: String,
    /// The holder.
    pub owner: LeaseOwner,
    /// This grant of the lease; renew and complete present it.
    pub lease_token: String,
    /// Grows by one at every new grant, kept across releases: never reused.
    pub fencing_token: u64,
    /// When it was granted, in epoch milliseconds.
    pub claimed_at_ms: i64,
    /// When it lapses unless renewed, in epoch milliseconds.
    pub expires_at_ms: i64,
}

impl ProcessLease {
    /// A lease as a store grants it: for keeping one's parts elsewhere and presenting it again
    /// (a lease also serialises whole).
    pub fn new(
        process_id: impl Into<String>,
        owner: LeaseOwner,
        lease_token: impl Into<String>,
        fencing_token: u64,
        claimed_at_ms: i64,
        expires_at_ms: i64,
    ) -> Self {
        Self {
            process_id: process_id.into(),
            owner,
            lease_token: lease_token.into(),
            fencing_token,
            claimed_at_ms,
            expires_at_ms,
        }
    }

    setters! {
        /// Sets [`lease_token`](#structfield.lease_token): the grant presented.
        lease_token: String;
        /// Sets [`expires_at_ms`](#structfield.expires_at_ms): when it lapses.
        expires_at_ms: i64;
    }
}

/// The outcome of claiming a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum LeaseClaim {
    /// The caller holds it.
    Acquired(ProcessLease),
    /// Somebody else holds a live lease.
    Busy {
        /// The current holder.
        holder: ProcessLease,
    },
}

impl LeaseClaim {
    /// The lease, when acquired.
    pub fn acquired(self) -> Option<ProcessLease> {
        match self {
            LeaseClaim::Acquired(lease) => Some(lease),
            LeaseClaim::Busy { .. } => None,
        }
    }
}
