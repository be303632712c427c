//! The registry's operations: one struct each, run with `store.exec` or composed with
//! `tx.exec`. Leases are in `lease.rs`.
//!
//! Branching lives here; statements live in `sql.rs`. Every op checks its input before it
//! writes, so bad input writes nothing.

use serde_json::json;

use super::semantics::{self, CANCEL_REQUESTED, check_scope};
use super::sql;
use super::types::{
    AppendRequest, Appended, AwaitOutput, EventSemantics, ExternalRef, HandleDescriptor,
    HandleGrant, ListFilter, ProcessCounts, ProcessEvent, ProcessRecord, ProcessStatus,
    PruneReport, Registration, SessionDeleteReport, SessionScope, WaitKind, WaitState,
    WakeDelivery,
};
use crate::core::counts;
use crate::core::events::{self, Event, Stream};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::limits::Limits;

/// Registers a process. The same content again returns the first record and writes
/// nothing; different content under the same id is `Conflict`.
#[derive(Debug, Clone, PartialEq)]
pub struct Register {
    /// The registration.
    pub registration: Registration,
}

/// One process, or `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The process.
    pub id: String,
}

/// A page of processes matching a filter, in id order.
#[derive(Debug, Clone, PartialEq)]
pub struct List {
    /// Which processes, and which page.
    pub filter: ListFilter,
}

/// Counts the tenant's processes by state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountProcesses;

/// Where the tenant's kept process counts differ from a recount of its processes; see
/// [`Processes::audit_counts`](super::Processes::audit_counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts;

/// Sets a process's external reference once (the same again is a no-op that writes nothing;
/// another is `Conflict`).
#[derive(Debug, Clone, PartialEq)]
pub struct SetExternalRef {
    /// The process.
    pub id: String,
    /// Where it lives elsewhere.
    pub external_ref: ExternalRef,
}

/// Grants a session scope a handle on a process (replacing the descriptor of an existing
/// grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantHandle {
    /// Who may address it.
    pub scope: SessionScope,
    /// The process.
    pub id: String,
    /// How the scope refers to it.
    pub descriptor: HandleDescriptor,
}

/// Removes a scope's grant; output whether there was one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeHandle {
    /// The scope.
    pub scope: SessionScope,
    /// The process.
    pub id: String,
}

/// Moves grants from one scope to another, all or none: each must be held by `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferHandles {
    /// The scope that holds them.
    pub from: SessionScope,
    /// The scope that will.
    pub to: SessionScope,
    /// The processes, at most `Limits::page_size_max`.
    pub ids: Vec<String>,
}

/// A scope's grants with their processes, in process id order (at most
/// `Limits::page_size_max`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleGrants {
    /// The scope.
    pub scope: SessionScope,
    /// Only grants of running processes.
    pub live_only: bool,
}

/// Whether a scope holds a grant on an existing process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HasHandleGrant {
    /// The scope.
    pub scope: SessionScope,
    /// The process.
    pub id: String,
}

/// Every grant on a process, by session and scope (at most `Limits::page_size_max`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantsForProcess {
    /// The process.
    pub id: String,
}

/// Removes every grant of a session (all its scopes and frames) and clears it as a wake
/// target; reports which running processes lost their last grant. Wake acknowledgements
/// stay, so consumed wakes do not come back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSessionState {
    /// The session.
    pub session_id: String,
}

/// Appends an event of a declared type to a process's stream (see
/// [`Processes::append_event`](super::Processes::append_event)).
#[derive(Debug, Clone, PartialEq)]
pub struct AppendEvent {
    /// The process.
    pub id: String,
    /// The event.
    pub request: AppendRequest,
}

/// A process's events after a sequence, oldest first, at most `Limits::page_size_max`
/// (read on from the last one's `seq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsAfter {
    /// The process.
    pub id: String,
    /// Events after this sequence.
    pub after_seq: u64,
}

/// How many events of a type a process had up to a sequence, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountEventsThrough {
    /// The process.
    pub id: String,
    /// The event type.
    pub event_type: String,
    /// Up to and including this sequence.
    pub upto_seq: u64,
}

/// A process's last events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEvents {
    /// The process.
    pub id: String,
    /// How many, at most `Limits::page_size_max`.
    pub limit: usize,
}

/// A process's unacknowledged wake events after a sequence, oldest first, at most
/// `Limits::page_size_max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeEventsAfter {
    /// The process.
    pub id: String,
    /// Events after this sequence.
    pub after_seq: u64,
}

/// Acknowledges the wake of one event (again: no change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckWake {
    /// The process.
    pub id: String,
    /// The wake event's sequence.
    pub seq: u64,
}

/// Ends a process with an output: appends `process.completed`, `.failed` or `.cancelled`
/// (by the output's state) keyed `terminal:<type>` (keys are per process stream), so the same
/// output again is a no-op; returns the record.
#[derive(Debug, Clone, PartialEq)]
pub struct Complete {
    /// The process.
    pub id: String,
    /// What it leaves.
    pub output: AwaitOutput,
}

/// Puts a running process in a wait state (a terminal one is `Conflict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetWait {
    /// The process.
    pub id: String,
    /// What it waits for.
    pub wait: WaitKind,
}

/// Clears a process's wait state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClearWait {
    /// The process.
    pub id: String,
}

/// Deletes up to `Limits::page_size_max` finished processes last changed before a cutoff
/// (strictly), with their events, grants, wakes and leases (the tenant's fence floor keeps
/// their highest fencing token); call again while it prunes some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneTerminal {
    /// Epoch milliseconds.
    pub cutoff_ms: i64,
}

impl Sealed for Register {}
impl Op for Register {
    type Output = ProcessRecord;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        semantics::check_registration_shape(&self.registration, limits)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessRecord> {
        let prepared = semantics::prepare(self.registration, tx.limits())?;
        if let Some(existing) = sql::select(tx.db(), tx.tenant(), &prepared.registration.id)? {
            if existing.registration_hash != prepared.hash {
                return Err(Error::Conflict(format!(
                    "process {} is registered with other content (hash {}, not {})",
                    existing.id, existing.registration_hash, prepared.hash
                )));
            }
            return Ok(existing);
        }
        let stream = Stream::process(&prepared.registration.id);
        if events::has_events(tx.db(), tx.tenant(), &stream)? {
            return Err(Error::Conflict(format!(
                "{stream} already holds events appended without the registry"
            )));
        }
        let record = ProcessRecord::registered(prepared.registration, prepared.hash, tx.now_ms());
        sql::insert(tx.db(), tx.tenant(), &record, &prepared.encoded)?;
        Ok(record)
    }
}

impl Sealed for Get {}
impl Op for Get {
    type Output = Option<ProcessRecord>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<ProcessRecord>> {
        tx.limits().check_id("process id", &self.id)?;
        sql::select(tx.db(), tx.tenant(), &self.id)
    }
}

impl Sealed for List {}
impl Op for List {
    type Output = Vec<ProcessRecord>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        self.filter.definition.as_ref().map_or(Ok(()), |value| limits.check_depth(value))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<ProcessRecord>> {
        tx.limits().check_page(self.filter.page.limit)?;
        sql::list(tx.db(), tx.tenant(), &self.filter)
    }
}

impl Sealed for CountProcesses {}
impl Op for CountProcesses {
    type Output = ProcessCounts;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessCounts> {
        sql::count(tx.db(), tx.tenant())
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

impl Sealed for SetExternalRef {}
impl Op for SetExternalRef {
    type Output = ProcessRecord;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        self.external_ref.metadata.as_ref().map_or(Ok(()), |value| limits.check_depth(value))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessRecord> {
        let mut record = process(tx, &self.id)?;
        tx.limits().check_json("external ref bytes", &self.external_ref)?;
        match &record.external_ref {
            Some(existing) if *existing == self.external_ref => return Ok(record),
            Some(_) => {
                return Err(Error::Conflict(format!(
                    "process {} already has another external ref",
                    self.id
                )));
            }
            None => {}
        }
        let before = sql::count_state(&record);
        record.external_ref = Some(self.external_ref);
        save_changed(tx, record, before)
    }
}

impl Sealed for GrantHandle {}
impl Op for GrantHandle {
    type Output = HandleGrant;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<HandleGrant> {
        check_scope(tx.limits(), &self.scope)?;
        tx.limits().check_json("handle descriptor bytes", &self.descriptor)?;
        require(tx, &self.id)?;
        let grant = HandleGrant {
            session_id: self.scope.session_id.clone(),
            scope_id: self.scope.id(),
            process_id: self.id,
            descriptor: self.descriptor,
        };
        sql::upsert_grant(tx.db(), tx.tenant(), &grant, tx.now_ms())?;
        Ok(grant)
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for RevokeHandle {}
impl Op for RevokeHandle {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        check_scope(tx.limits(), &self.scope)?;
        tx.limits().check_id("process id", &self.id)?;
        sql::delete_grant(tx.db(), tx.tenant(), &self.scope.id(), &self.id)
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for TransferHandles {}
impl Op for TransferHandles {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        check_scope(tx.limits(), &self.from)?;
        check_scope(tx.limits(), &self.to)?;
        tx.limits().check_page(self.ids.len())?;
        let (from_id, to_id) = (self.from.id(), self.to.id());
        for id in &self.ids {
            tx.limits().check_id("process id", id)?;
            let Some(grant) = sql::select_grant(tx.db(), tx.tenant(), &from_id, id)? else {
                return Err(Error::not_found("handle grant", &format!("{from_id} -> {id}")));
            };
            sql::delete_grant(tx.db(), tx.tenant(), &from_id, id)?;
            let moved = HandleGrant {
                session_id: self.to.session_id.clone(),
                scope_id: to_id.clone(),
                ..grant
            };
            sql::upsert_grant(tx.db(), tx.tenant(), &moved, tx.now_ms())?;
        }
        Ok(())
    }
}

impl Sealed for HandleGrants {}
impl Op for HandleGrants {
    type Output = Vec<(HandleGrant, ProcessRecord)>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<(HandleGrant, ProcessRecord)>> {
        check_scope(tx.limits(), &self.scope)?;
        let limit = tx.limits().page_size_max;
        sql::select_scope_grants(tx.db(), tx.tenant(), &self.scope.id(), self.live_only, limit)
    }
}

impl Sealed for HasHandleGrant {}
impl Op for HasHandleGrant {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        check_scope(tx.limits(), &self.scope)?;
        tx.limits().check_id("process id", &self.id)?;
        let grant = sql::select_grant(tx.db(), tx.tenant(), &self.scope.id(), &self.id)?;
        Ok(grant.is_some() && sql::select_hash(tx.db(), tx.tenant(), &self.id)?.is_some())
    }
}

impl Sealed for GrantsForProcess {}
impl Op for GrantsForProcess {
    type Output = Vec<HandleGrant>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<HandleGrant>> {
        require(tx, &self.id)?;
        let limit = tx.limits().page_size_max;
        sql::select_process_grants(tx.db(), tx.tenant(), &self.id, limit)
    }
}

impl Sealed for DeleteSessionState {}
impl Op for DeleteSessionState {
    type Output = SessionDeleteReport;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<SessionDeleteReport> {
        tx.limits().check_id("session id", &self.session_id)?;
        let grants = sql::select_session_grants(tx.db(), tx.tenant(), &self.session_id)?;
        let revoked = sql::delete_session_grants(tx.db(), tx.tenant(), &self.session_id)?;
        let mut report = SessionDeleteReport {
            session_id: self.session_id.clone(),
            revoked_handle_count: revoked,
            ..SessionDeleteReport::default()
        };
        sort_orphans(tx, &grants, &mut report)?;
        sql::clear_wake_targets(tx.db(), tx.tenant(), &self.session_id, tx.now_ms())?;
        Ok(report)
    }
}

/// Sorts the running processes that lost a grant into orphaned (no grant left) and
/// preserved.
fn sort_orphans(
    tx: &Tx<'_>,
    grants: &[HandleGrant],
    report: &mut SessionDeleteReport,
) -> Result<()> {
    let mut ids: Vec<&str> = grants.iter().map(|grant| grant.process_id.as_str()).collect();
    ids.dedup();
    for id in ids {
        let Some(record) = sql::select(tx.db(), tx.tenant(), id)? else { continue };
        if record.is_terminal() {
            continue;
        }
        if sql::has_any_grant(tx.db(), tx.tenant(), id)? {
            report.preserved_process_ids.push(id.to_owned());
        } else {
            report.orphaned_process_ids.push(id.to_owned());
        }
    }
    Ok(())
}

impl Sealed for AppendEvent {}
impl Op for AppendEvent {
    type Output = Appended;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.request.payload)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Appended> {
        let record = process(tx, &self.id)?;
        check_request(tx, &self.request)?;
        if let Some(key) = &self.request.replay_key {
            let stream = Stream::process(&self.id);
            let request = &self.request;
            let found = events::keyed_event(
                tx.db(),
                tx.tenant(),
                &stream,
                key,
                &request.event_type,
                &request.payload,
            )?;
            if let Some(existing) = found {
                return replay(tx, record, &self.request, existing);
            }
        }
        append_new(tx, record, self.request)
    }
}

/// Checks ids, sizes and the required replay keys of an append request.
fn check_request(tx: &Tx<'_>, request: &AppendRequest) -> Result<()> {
    tx.limits().check_id("event type", &request.event_type)?;
    tx.limits().check_json("event payload bytes", &request.payload)?;
    if let Some(key) = &request.replay_key {
        tx.limits().check_id("replay key", key)?;
        check_reserved_key(key, &request.event_type)?;
    }
    if let Some(scope) = &request.wake_target_scope {
        check_scope(tx.limits(), scope)?;
    }
    Ok(())
}

/// Keeps the keys the registry builds for its own events (`terminal:<type>` for `complete`,
/// `cancel:<hash>` for cancel requests) to those event types, so no other event can take them.
fn check_reserved_key(key: &str, event_type: &str) -> Result<()> {
    let reserved_for = if let Some(rest) = key.strip_prefix("terminal:") {
        (rest != event_type).then_some("its terminal event type")
    } else if key.starts_with("cancel:") {
        (event_type != CANCEL_REQUESTED).then_some(CANCEL_REQUESTED)
    } else {
        None
    };
    match reserved_for {
        Some(owner) => Err(Error::InvalidInput(format!(
            "replay key {key:?} is reserved for {owner}, not {event_type:?}"
        ))),
        None => Ok(()),
    }
}

/// The same event appended again under its replay key: returns it, repairing the record's
/// status if the event ended the process and the record does not say so.
fn replay(
    tx: &mut Tx<'_>,
    mut record: ProcessRecord,
    request: &AppendRequest,
    existing: Event,
) -> Result<Appended> {
    let semantics = sql::select_semantics(tx.db(), tx.tenant(), &record.id, existing.seq)?;
    if let (Some(terminal), false) = (&semantics.terminal, record.is_terminal()) {
        let before = sql::count_state(&record);
        project_terminal(&mut record, terminal.await_output.clone(), existing.created_at_ms);
        sql::save(tx.db(), tx.tenant(), &record, before)?;
    }
    let event = process_event(&record.id, existing, semantics);
    let wake = wake_delivery(&record, request, &event);
    Ok(Appended { event, wake, replayed: true })
}

/// Appends a new event: declared type, replay key where required, payload schema, semantics,
/// and the process must not have ended if the event would end it.
fn append_new(
    tx: &mut Tx<'_>,
    mut record: ProcessRecord,
    request: AppendRequest,
) -> Result<Appended> {
    let Some(event_type) = record.event_types.iter().find(|t| t.name == request.event_type) else {
        return Err(Error::InvalidInput(format!(
            "process {} does not declare event type {:?}",
            record.id, request.event_type
        )));
    };
    let needs_key = event_type.semantics.terminal.is_some() || event_type.name == CANCEL_REQUESTED;
    if needs_key && request.replay_key.as_deref().is_none_or(str::is_empty) {
        return Err(Error::InvalidInput(format!(
            "event type {:?} requires a replay key",
            request.event_type
        )));
    }
    semantics::check_payload(event_type, &request.payload)?;
    let stream = Stream::process(&record.id);
    let seq = events::select_head(tx.db(), tx.tenant(), &stream)? + 1;
    let limit_bytes = tx.limits().payload_bytes_max;
    let semantics =
        semantics::materialize(event_type, &record.id, seq, &request.payload, limit_bytes)?;
    if semantics.terminal.is_some() && record.is_terminal() {
        return Err(Error::Conflict(format!("process {} has already ended", record.id)));
    }
    let (event_type, payload) = (request.event_type.as_str(), request.payload.clone());
    let appended = match request.replay_key.as_deref() {
        // `apply` has just found the key unused.
        Some(key) => events::append_under_unused_key(tx, &stream, event_type, payload, key)?,
        None => events::append(tx, &stream, event_type, payload, None)?,
    };
    record_semantics(tx, &record.id, appended.seq, &semantics)?;
    let before = sql::count_state(&record);
    match &semantics.terminal {
        Some(terminal) => project_terminal(&mut record, terminal.await_output.clone(), tx.now_ms()),
        None => record.updated_at_ms = tx.now_ms(),
    }
    sql::save(tx.db(), tx.tenant(), &record, before)?;
    let event = ProcessEvent {
        process_id: record.id.clone(),
        seq: appended.seq,
        position: appended.position,
        event_type: request.event_type.clone(),
        payload: request.payload.clone(),
        replay_key: request.replay_key.clone(),
        semantics,
        occurred_at_ms: tx.now_ms(),
    };
    let wake = wake_delivery(&record, &request, &event);
    Ok(Appended { event, wake, replayed: false })
}

fn record_semantics(tx: &Tx<'_>, id: &str, seq: u64, semantics: &EventSemantics) -> Result<()> {
    if semantics.terminal.is_none() && semantics.wake.is_none() {
        return Ok(());
    }
    let encoded = serde_json::to_string(semantics)?;
    tx.limits().check_payload("event semantics bytes", &encoded)?;
    sql::insert_semantics(tx.db(), tx.tenant(), id, seq, &encoded, semantics.wake.is_some())
}

/// Ends the record with `output`: a finished process waits for nothing.
fn project_terminal(record: &mut ProcessRecord, output: AwaitOutput, at_ms: i64) {
    record.status = ProcessStatus::from_output(output);
    record.wait = None;
    record.updated_at_ms = at_ms;
}

/// The wake to deliver for `event`, when it wakes and there is a target (the request's, or
/// else the process's).
fn wake_delivery(
    record: &ProcessRecord,
    request: &AppendRequest,
    event: &ProcessEvent,
) -> Option<WakeDelivery> {
    let wake = event.semantics.wake.as_ref()?;
    let target = request.wake_target_scope.as_ref().or(record.wake_target.as_ref())?;
    let scope_id = target.id();
    Some(WakeDelivery {
        wake_id: semantics::wake_id(&scope_id, &wake.dedupe_key),
        target_session_id: target.session_id.clone(),
        target_scope_id: scope_id,
        process_id: record.id.clone(),
        seq: event.seq,
        event_type: event.event_type.clone(),
        dedupe_key: wake.dedupe_key.clone(),
        input: wake.input.clone(),
        created_at_ms: event.occurred_at_ms,
    })
}

fn process_event(process_id: &str, event: Event, semantics: EventSemantics) -> ProcessEvent {
    ProcessEvent {
        process_id: process_id.to_owned(),
        seq: event.seq,
        position: event.position,
        event_type: event.event_type,
        payload: event.payload,
        replay_key: event.idem_key,
        semantics,
        occurred_at_ms: event.created_at_ms,
    }
}

impl Sealed for EventsAfter {}
impl Op for EventsAfter {
    type Output = Vec<ProcessEvent>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<ProcessEvent>> {
        require(tx, &self.id)?;
        let limit = tx.limits().page_size_max;
        let events = events::read_stream(
            tx.db(),
            tx.tenant(),
            &Stream::process(&self.id),
            self.after_seq,
            limit,
        )?;
        with_semantics(tx, &self.id, events)
    }
}

impl Sealed for CountEventsThrough {}
impl Op for CountEventsThrough {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        require(tx, &self.id)?;
        tx.limits().check_id("event type", &self.event_type)?;
        let stream = Stream::process(&self.id);
        events::count_through(tx.db(), tx.tenant(), &stream, &self.event_type, self.upto_seq)
    }
}

impl Sealed for RecentEvents {}
impl Op for RecentEvents {
    type Output = Vec<ProcessEvent>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<ProcessEvent>> {
        require(tx, &self.id)?;
        tx.limits().check_page(self.limit)?;
        let stream = Stream::process(&self.id);
        let events = events::read_recent(tx.db(), tx.tenant(), &stream, self.limit)?;
        with_semantics(tx, &self.id, events)
    }
}

impl Sealed for WakeEventsAfter {}
impl Op for WakeEventsAfter {
    type Output = Vec<ProcessEvent>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<ProcessEvent>> {
        require(tx, &self.id)?;
        let limit = tx.limits().page_size_max;
        let seqs =
            sql::select_unacked_wakes(tx.db(), tx.tenant(), &self.id, self.after_seq, limit)?;
        let stream = Stream::process(&self.id);
        let mut events = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let found =
                events::read_stream(tx.db(), tx.tenant(), &stream, seq.saturating_sub(1), 1)?;
            events.extend(found.into_iter().filter(|event| event.seq == seq));
        }
        with_semantics(tx, &self.id, events)
    }
}

/// Pairs each event with what it meant.
fn with_semantics(tx: &Tx<'_>, id: &str, events: Vec<Event>) -> Result<Vec<ProcessEvent>> {
    events
        .into_iter()
        .map(|event| {
            let semantics = sql::select_semantics(tx.db(), tx.tenant(), id, event.seq)?;
            Ok(process_event(id, event, semantics))
        })
        .collect()
}

impl Sealed for AckWake {}
impl Op for AckWake {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        require(tx, &self.id)?;
        let semantics = sql::select_semantics(tx.db(), tx.tenant(), &self.id, self.seq)?;
        if semantics.wake.is_none() {
            return Err(Error::InvalidInput(format!(
                "event {} of process {} carries no wake",
                self.seq, self.id
            )));
        }
        sql::insert_ack(tx.db(), tx.tenant(), &self.id, self.seq, tx.now_ms())
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for Complete {}
impl Op for Complete {
    type Output = ProcessRecord;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        semantics::check_output_shape(&self.output, limits)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessRecord> {
        let event_type = self.output.terminal_state().event_type();
        let key = format!("terminal:{event_type}");
        let payload = json!({ "await_output": serde_json::to_value(&self.output)? });
        let request = AppendRequest::new(event_type, payload).replay_key(key);
        tx.exec(AppendEvent { id: self.id.clone(), request })?;
        process(tx, &self.id)
    }
}

impl Sealed for SetWait {}
impl Op for SetWait {
    type Output = ProcessRecord;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessRecord> {
        let mut record = process(tx, &self.id)?;
        check_wait(tx, &self.wait)?;
        if record.is_terminal() {
            return Err(Error::Conflict(format!("process {} has ended and cannot wait", self.id)));
        }
        let before = sql::count_state(&record);
        record.wait = Some(WaitState { kind: self.wait, since_ms: tx.now_ms() });
        save_changed(tx, record, before)
    }
}

fn check_wait(tx: &Tx<'_>, wait: &WaitKind) -> Result<()> {
    let WaitKind::Signal { name, event_type, key, .. } = wait;
    tx.limits().check_id("signal name", name)?;
    tx.limits().check_id("event type", event_type)?;
    tx.limits().check_id("signal key", key)?;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(Error::InvalidInput(format!(
            "signal name {name:?} may hold only letters, digits, '_' and '-'"
        )));
    }
    Ok(())
}

impl Sealed for ClearWait {}
impl Op for ClearWait {
    type Output = ProcessRecord;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessRecord> {
        let mut record = process(tx, &self.id)?;
        let before = sql::count_state(&record);
        record.wait = None;
        save_changed(tx, record, before)
    }
}

impl Sealed for PruneTerminal {}
impl Op for PruneTerminal {
    type Output = PruneReport;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<PruneReport> {
        let limit = tx.limits().page_size_max;
        let ids = sql::select_prunable(tx.db(), tx.tenant(), self.cutoff_ms, limit)?;
        let mut report = PruneReport::default();
        for id in ids {
            let stream = Stream::process(&id);
            report.pruned_events += events::delete_history(tx.db(), tx.tenant(), &stream)?;
            sql::raise_fence_floor(tx.db(), tx.tenant(), &id)?;
            sql::delete(tx.db(), tx.tenant(), &id)?;
            report.pruned_processes += 1;
        }
        Ok(report)
    }
}

/// Stamps a changed record with the batch's time and saves it; `before` is its state as
/// stored (`sql::count_state`), whose count moves if the change moved it.
fn save_changed(
    tx: &Tx<'_>,
    mut record: ProcessRecord,
    before: &'static str,
) -> Result<ProcessRecord> {
    record.updated_at_ms = tx.now_ms();
    sql::save(tx.db(), tx.tenant(), &record, before)?;
    Ok(record)
}

/// `NotFound` unless the process exists (without reading its record).
pub(super) fn require(tx: &Tx<'_>, id: &str) -> Result<()> {
    tx.limits().check_id("process id", id)?;
    match sql::select_hash(tx.db(), tx.tenant(), id)? {
        Some(_) => Ok(()),
        None => Err(Error::not_found("process", id)),
    }
}

/// The process, or `NotFound`.
pub(super) fn process(tx: &Tx<'_>, id: &str) -> Result<ProcessRecord> {
    tx.limits().check_id("process id", id)?;
    sql::select(tx.db(), tx.tenant(), id)?.ok_or_else(|| Error::not_found("process", id))
}
