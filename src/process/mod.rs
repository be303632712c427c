//! The process registry: long-running processes with idempotent event logs, wake-ups for
//! the sessions that wait on them, session handle grants, and fenced leases.
//!
//! A process is registered once ([`Registration`]; the same content again returns the first
//! record, other content under its id is `Conflict`). It declares the event types it may
//! emit, each with a payload schema and what its events mean: a terminal type ends the
//! process with an output ([`AwaitOutput`]), a wake type gives a session something to act on.
//! Six default types are always declared (`process.cancel_requested`, `process.waiting`,
//! `process.resumed`, `process.completed`, `process.failed`, `process.cancelled`).
//!
//! Events go to the event log on `Stream::process(id)`, numbered from 1; while the process is
//! registered only the registry writes that stream (the event log refuses callers). A pruned
//! process's events and keys go with it, but the stream keeps its head: an id registered
//! again continues the numbering, so a subscriber's cursor stays valid.
//! A replay key makes an append idempotent: the same event again returns the first one (and repairs a record that
//! does not show the end the event made); another event under the key is `Conflict`.
//! Terminal and cancel-request events need one; the keys the registry builds for them
//! (`terminal:<type>`, `cancel:<hash>`) are refused for other event types. A wake is worked out when its event is
//! appended and returned as a [`WakeDelivery`] when there is a target; `wake_events_after`
//! lists the wakes not yet acknowledged with `ack_wake`.
//!
//! Leases: [`LeaseClaim`] from `claim_lease`; the same owner incarnation re-enters its lease;
//! `reclaim_lease` takes a live lease over only from a holder that is provably dead (same host
//! and boot, its pid gone or reused); fencing tokens only grow, kept across releases and, as
//! a per-tenant floor, across a prune and re-registration of the same id.
//!
//! Fencing tokens are durable like every commit: under `Durability::Normal` a power loss may
//! take the last commits, and with them the last tokens handed out, so a later grant could
//! repeat one. Keep `Durability::Full` (the default) where fencing must hold across power loss.
//!
//! Ops live in `ops.rs` and `lease.rs`, event meaning in `semantics.rs`, payload schemas in
//! `json_schema.rs`, SQL in `sql.rs`; the facade is [`Processes`], reached with
//! `store.processes()`.

mod json_schema;
mod lease;
mod ops;
mod semantics;
mod sql;
mod types;

use std::borrow::Borrow;
use std::time::{Duration, Instant};

use crate::core::db::Db;
use crate::core::events::Stream;
use crate::error::{Error, Result};
use crate::page::Page;
use crate::store::Store;

pub use lease::{ClaimLease, CompleteLease, ReclaimLease, RenewLease};
pub use ops::{
    AckWake, AppendEvent, AuditCounts, ClearWait, Complete, CountEventsThrough, CountProcesses,
    DeleteSessionState, EventsAfter, Get, GrantHandle, GrantsForProcess, HandleGrants,
    HasHandleGrant, List, PruneTerminal, RecentEvents, Register, RevokeHandle, SetExternalRef,
    SetWait, TransferHandles, WakeEventsAfter,
};
pub use types::{
    AppendRequest, Appended, AwaitOutput, DedupeKey, EventSemantics, EventType, ExternalRef,
    HandleDescriptor, HandleGrant, Identity, LeaseClaim, LeaseOwner, ListFilter, Liveness,
    Originator, ProcessCounts, ProcessEvent, ProcessLease, ProcessRecord, ProcessStatus,
    PruneReport, Registration, Selector, SemanticsSpec, SessionDeleteReport, SessionScope,
    StatusFilter, TerminalSemantics, TerminalSpec, TerminalState, WaitKind, WaitState, Wake,
    WakeDelivery, WakeSpec,
};

/// Whether `stream` is the stream of a registered process of `tenant`: only the registry
/// writes it (registered with the engine in `crate::domains`).
pub(crate) fn owns_stream(
    db: Db<'_>,
    tenant: &str,
    stream: &crate::core::events::Stream,
) -> Result<bool> {
    if stream.kind() != crate::core::events::StreamKind::Process {
        return Ok(false);
    }
    Ok(sql::select_hash(db, tenant, stream.id())?.is_some())
}

/// The process registry of a store view: `store.processes()`.
#[derive(Debug, Clone, Copy)]
pub struct Processes<'a> {
    store: &'a Store,
}

impl<'a> Processes<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// Registers a process (the default event types are added when missing).
    ///
    /// # Errors
    /// `Conflict` when the id is registered with other content; `InvalidInput`/`TooLarge`
    /// for a bad id, event type, schema or terminal spec.
    pub fn register(&self, registration: Registration) -> Result<ProcessRecord> {
        self.store.exec(Register { registration })
    }

    /// One process, or `None` (also for another tenant's).
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn get(&self, id: &str) -> Result<Option<ProcessRecord>> {
        self.store.exec(Get { id: id.into() })
    }

    /// A page of processes matching `filter`, in id order. The default filter shows running
    /// processes only.
    ///
    /// # Errors
    /// `TooLarge` for a page past `Limits::page_size_max`.
    pub fn list(&self, filter: impl Borrow<ListFilter>) -> Result<Vec<ProcessRecord>> {
        let filter = filter.borrow();
        // Checked before the clone: cloning a value recurses once per level.
        if let Some(definition) = &filter.definition {
            self.store.limits().check_depth(definition)?;
        }
        self.store.exec(List { filter: filter.clone() })
    }

    /// How many of the tenant's processes are in each state (running ones that wait apart),
    /// from counts kept as processes register, change state and are pruned: it reads no
    /// process.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn count(&self) -> Result<ProcessCounts> {
        self.store.exec(CountProcesses)
    }

    /// Where the tenant's kept process counts (what [`Processes::count`] reads) differ from a
    /// recount of its processes, one line each; empty when they agree, as they always should
    /// (`spindle check` reports any line). It reads every process of the tenant.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn audit_counts(&self) -> Result<Vec<String>> {
        self.store.exec(AuditCounts)
    }

    /// The running processes, in id order: the first `Limits::page_size_max` of them (page
    /// on with `list`).
    ///
    /// # Errors
    /// Storage errors only.
    pub fn list_non_terminal(&self) -> Result<Vec<ProcessRecord>> {
        let page = Page::first(self.store.limits().page_size_max);
        self.list(ListFilter { page, ..ListFilter::default() })
    }

    /// Sets the process's external reference once; the same again changes nothing.
    ///
    /// # Errors
    /// `NotFound`; `Conflict` when another reference is set.
    pub fn set_external_ref(&self, id: &str, external_ref: ExternalRef) -> Result<ProcessRecord> {
        self.store.exec(SetExternalRef { id: id.into(), external_ref })
    }

    /// Lets `scope` address the process.
    ///
    /// # Errors
    /// `NotFound` for an unknown process; `InvalidInput`/`TooLarge` for a bad scope (a session
    /// id may not hold `/`) or a descriptor past the payload limit.
    pub fn grant_handle(
        &self,
        scope: &SessionScope,
        id: &str,
        descriptor: HandleDescriptor,
    ) -> Result<HandleGrant> {
        self.store.exec(GrantHandle { scope: scope.clone(), id: id.into(), descriptor })
    }

    /// Removes `scope`'s grant; whether there was one.
    ///
    /// # Errors
    /// `InvalidInput` for bad ids.
    pub fn revoke_handle(&self, scope: &SessionScope, id: &str) -> Result<bool> {
        self.store.exec(RevokeHandle { scope: scope.clone(), id: id.into() })
    }

    /// Moves the grants of `ids` from `from` to `to`, all or none.
    ///
    /// # Errors
    /// `NotFound` when `from` does not hold one of them (nothing moves).
    pub fn transfer_handles(
        &self,
        from: &SessionScope,
        to: &SessionScope,
        ids: &[impl AsRef<str>],
    ) -> Result<()> {
        let ids = ids.iter().map(|id| id.as_ref().to_owned()).collect();
        self.store.exec(TransferHandles { from: from.clone(), to: to.clone(), ids })
    }

    /// `scope`'s grants with their processes, in process id order.
    ///
    /// # Errors
    /// `InvalidInput` for a bad scope.
    pub fn handle_grants(&self, scope: &SessionScope) -> Result<Vec<(HandleGrant, ProcessRecord)>> {
        self.store.exec(HandleGrants { scope: scope.clone(), live_only: false })
    }

    /// `scope`'s grants of running processes.
    ///
    /// # Errors
    /// `InvalidInput` for a bad scope.
    pub fn live_handle_grants(
        &self,
        scope: &SessionScope,
    ) -> Result<Vec<(HandleGrant, ProcessRecord)>> {
        self.store.exec(HandleGrants { scope: scope.clone(), live_only: true })
    }

    /// Whether `scope` may address the process.
    ///
    /// # Errors
    /// `InvalidInput` for bad ids.
    pub fn has_handle_grant(&self, scope: &SessionScope, id: &str) -> Result<bool> {
        self.store.exec(HasHandleGrant { scope: scope.clone(), id: id.into() })
    }

    /// Every grant on the process.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn grants_for_process(&self, id: &str) -> Result<Vec<HandleGrant>> {
        self.store.exec(GrantsForProcess { id: id.into() })
    }

    /// Removes a session's grants and clears it as a wake target.
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn delete_session_state(&self, session_id: &str) -> Result<SessionDeleteReport> {
        self.store.exec(DeleteSessionState { session_id: session_id.into() })
    }

    /// Appends an event of a declared type; returns it and the wake to deliver, if any.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` for an undeclared type, a payload its schema refuses, a
    /// selector that does not match, a terminal or cancel-request event without a replay key,
    /// a key reserved for another event type, a terminal output of another state, or a bad
    /// wake target scope; `TooLarge` for a payload, template text or semantics past the payload
    /// limit; `Conflict` for another event under a used replay key, or a terminal event on a
    /// finished process.
    pub fn append_event(&self, id: &str, request: AppendRequest) -> Result<Appended> {
        self.store.exec(AppendEvent { id: id.into(), request })
    }

    /// The process's events after `after_seq`, oldest first, at most `Limits::page_size_max`.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn events_after(&self, id: &str, after_seq: u64) -> Result<Vec<ProcessEvent>> {
        self.store.exec(EventsAfter { id: id.into(), after_seq })
    }

    /// How many events of `event_type` the process had up to `upto_seq`, inclusive.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn count_events_through(&self, id: &str, event_type: &str, upto_seq: u64) -> Result<u64> {
        self.store.exec(CountEventsThrough {
            id: id.into(),
            event_type: event_type.into(),
            upto_seq,
        })
    }

    /// The process's last `limit` events, oldest first.
    ///
    /// # Errors
    /// `NotFound`; `TooLarge` for a limit past `Limits::page_size_max`.
    pub fn recent_events(&self, id: &str, limit: usize) -> Result<Vec<ProcessEvent>> {
        self.store.exec(RecentEvents { id: id.into(), limit })
    }

    /// The process's unacknowledged wake events after `after_seq`, oldest first.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn wake_events_after(&self, id: &str, after_seq: u64) -> Result<Vec<ProcessEvent>> {
        self.store.exec(WakeEventsAfter { id: id.into(), after_seq })
    }

    /// Acknowledges the wake of event `seq`: `wake_events_after` leaves it out from now on.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` when that event carries no wake.
    pub fn ack_wake(&self, id: &str, seq: u64) -> Result<()> {
        self.store.exec(AckWake { id: id.into(), seq })
    }

    /// Ends the process with `output` (idempotent for the same output).
    ///
    /// # Errors
    /// `NotFound`; `Conflict` for another output of the same state, or when the process has
    /// already ended otherwise.
    pub fn complete(&self, id: &str, output: AwaitOutput) -> Result<ProcessRecord> {
        self.store.exec(Complete { id: id.into(), output })
    }

    /// Puts a running process in a wait state (a `WaitState`'s `since_ms` is replaced by the
    /// store's clock).
    ///
    /// # Errors
    /// `NotFound`; `Conflict` for a finished process; `InvalidInput` for a bad signal.
    pub fn set_wait(&self, id: &str, wait: impl Into<WaitKind>) -> Result<ProcessRecord> {
        self.store.exec(SetWait { id: id.into(), wait: wait.into() })
    }

    /// Clears the process's wait state.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn clear_wait(&self, id: &str) -> Result<ProcessRecord> {
        self.store.exec(ClearWait { id: id.into() })
    }

    /// Deletes finished processes last changed before `cutoff_ms` (at most
    /// `Limits::page_size_max` per call: call again while it prunes some).
    ///
    /// # Errors
    /// Storage errors only.
    pub fn prune_terminal(&self, cutoff_ms: i64) -> Result<PruneReport> {
        self.store.exec(PruneTerminal { cutoff_ms })
    }

    /// Waits until the process has ended or `timeout` passes; returns the record as it then
    /// is (check `is_terminal`). It follows the process's event stream, so it wakes when an
    /// event ends the process, in this process or (by polling) another.
    ///
    /// # Errors
    /// `NotFound` for an unknown process.
    pub fn await_terminal(&self, id: &str, timeout: Duration) -> Result<ProcessRecord> {
        let deadline = Instant::now().checked_add(timeout);
        let stream = Stream::process(id);
        let after = self.store.events().head(&stream)?;
        let mut events = self.store.subscribe(&stream, after)?;
        loop {
            let record = self.get(id)?.ok_or_else(|| Error::not_found("process", id))?;
            let left = deadline.map(|at| at.saturating_duration_since(Instant::now()));
            if record.is_terminal() || left.is_some_and(|left| left.is_zero()) {
                return Ok(record);
            }
            // Any event (or the timeout) means: look again.
            let _ = events.recv_timeout(left.unwrap_or(Duration::MAX))?;
        }
    }

    /// Claims the process's lease for `ttl_ms`.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` for bad ids or a ttl outside the lease limits.
    pub fn claim_lease(&self, id: &str, owner: &LeaseOwner, ttl_ms: i64) -> Result<LeaseClaim> {
        self.store.exec(ClaimLease { id: id.into(), owner: owner.clone(), ttl_ms })
    }

    /// Takes the lease over from `observed` when it is provably dead (see [`Liveness`]).
    ///
    /// # Errors
    /// As `claim_lease`.
    pub fn reclaim_lease(
        &self,
        id: &str,
        claimant: &LeaseOwner,
        observed: &ProcessLease,
        ttl_ms: i64,
    ) -> Result<LeaseClaim> {
        let op = ReclaimLease {
            id: id.into(),
            claimant: claimant.clone(),
            observed: observed.clone(),
            ttl_ms,
        };
        self.store.exec(op)
    }

    /// Extends a held lease by `ttl_ms` from now.
    ///
    /// # Errors
    /// `LeaseLost` when it lapsed or was granted to another holder.
    pub fn renew_lease(&self, lease: &ProcessLease, ttl_ms: i64) -> Result<ProcessLease> {
        self.store.exec(RenewLease { lease: lease.clone(), ttl_ms })
    }

    /// Releases a held lease (its fencing token is kept).
    ///
    /// # Errors
    /// `LeaseLost` when another holder has been granted it since.
    pub fn complete_lease(&self, lease: &ProcessLease) -> Result<()> {
        self.store.exec(CompleteLease { lease: lease.clone() })
    }
}

impl Store {
    /// The process registry: processes with idempotent event logs, wake-ups, handle grants
    /// and fenced leases.
    pub fn processes(&self) -> Processes<'_> {
        Processes::new(self)
    }
}
