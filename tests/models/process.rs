//! The model of the process registry (DESIGN.md §5.4, seed-semantics.md §2 as Spindle
//! implements them) over the three processes `a`, `b`, `c`: registrations with their content
//! variant, events with declared types and replay keys, terminal projection, wait states, and
//! the lease row of each process (holder, last fencing token). The caller passes the store's
//! time to every call.

use std::collections::BTreeMap;

use serde_json::json;
use spindle::process::{
    AppendRequest, AwaitOutput, EventSemantics, EventType, LeaseOwner, ProcessEvent, ProcessLease,
    ProcessRecord, ProcessStatus, Registration, TerminalSemantics, WaitKind, WaitState,
};

use super::{Expect, Refusal};

/// The processes the model knows, by index.
pub const PROCESSES: [&str; 3] = ["a", "b", "c"];

/// The model of one registered process: its record and its events, by sequence from 1.
#[derive(Debug, Clone)]
pub struct ModelProcess {
    pub variant: u64,
    pub record: ProcessRecord,
    pub events: Vec<ProcessEvent>,
    pub keys: BTreeMap<String, u64>,
}

/// The model of one process's lease row: the holder (live or lapsed) and the last fence.
#[derive(Debug, Clone, Default)]
pub struct ModelLease {
    pub holder: Option<ProcessLease>,
    pub last_fence: u64,
}

/// What the model expects of a claim or reclaim.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpectClaim {
    /// A new grant: everything but the lease token (the store draws it) is known.
    Granted(ProcessLease),
    /// The same incarnation re-entered its live lease: exactly this lease.
    Reentered(ProcessLease),
    /// Somebody else holds it: exactly this holder.
    Busy(ProcessLease),
}

#[derive(Debug, Default)]
pub struct Model {
    pub processes: BTreeMap<usize, ModelProcess>,
    pub leases: BTreeMap<usize, ModelLease>,
}

pub fn registration(p: usize, variant: u64) -> Registration {
    Registration::new(PROCESSES[p], "tool", json!({ "variant": variant }))
        .label(format!("process {p}"))
        .event_type(EventType::new("note"))
}

pub fn terminal_request(output: &AwaitOutput) -> AppendRequest {
    let event_type = output.terminal_state().event_type();
    let payload = json!({ "await_output": serde_json::to_value(output).expect("output") });
    let key = format!("terminal:{event_type}");
    AppendRequest::new(event_type, payload).replay_key(key)
}

pub fn outputs() -> [AwaitOutput; 4] {
    [
        AwaitOutput::Success { value: json!(1), control: None },
        AwaitOutput::Success { value: json!({ "two": 2 }), control: None },
        AwaitOutput::Failure {
            class: "execution".into(),
            code: "boom".into(),
            message: "it broke".into(),
            raw: None,
            control: None,
        },
        AwaitOutput::Cancelled { message: "stopped".into(), raw: None, control: None },
    ]
}

pub fn is_terminal_type(event_type: &str) -> bool {
    matches!(event_type, "process.completed" | "process.failed" | "process.cancelled")
}

pub fn valid_ttl(ttl_ms: i64) -> bool {
    (1..=24 * 60 * 60 * 1000).contains(&ttl_ms)
}

pub fn valid_owner(owner: &LeaseOwner) -> bool {
    !owner.owner_id.is_empty() && !owner.incarnation_id.is_empty()
}

pub fn same_grant(a: &ProcessLease, b: &ProcessLease) -> bool {
    a.owner.same_incarnation(&b.owner)
        && a.lease_token == b.lease_token
        && a.fencing_token == b.fencing_token
}

impl Model {
    /// `None` for a new process (the store's record is then taken as the model's), the record
    /// for the same content again, `Conflict` for other content.
    pub fn register(&self, p: usize, variant: u64) -> Expect<Option<ProcessRecord>> {
        match self.processes.get(&p) {
            None => Ok(None),
            Some(process) if process.variant == variant => Ok(Some(process.record.clone())),
            Some(_) => Err(Refusal::Conflict),
        }
    }

    /// The event an append returns (its position is 0 for a new event: the store picks it)
    /// and whether it is a replay; applies a new event to the model.
    pub fn append(
        &mut self,
        p: usize,
        request: &AppendRequest,
        now_ms: i64,
    ) -> Expect<(ProcessEvent, bool)> {
        let process = self.processes.get_mut(&p).ok_or(Refusal::NotFound)?;
        if let Some(key) = &request.replay_key
            && let Some(&seq) = process.keys.get(key)
        {
            let existing = &process.events[seq as usize - 1];
            let same =
                existing.event_type == request.event_type && existing.payload == request.payload;
            return if same { Ok((existing.clone(), true)) } else { Err(Refusal::Conflict) };
        }
        let declared = request.event_type == "note"
            || request.event_type == "process.cancel_requested"
            || is_terminal_type(&request.event_type);
        if !declared {
            return Err(Refusal::InvalidInput);
        }
        let needs_key = request.event_type == "process.cancel_requested"
            || is_terminal_type(&request.event_type);
        if needs_key && request.replay_key.is_none() {
            return Err(Refusal::InvalidInput);
        }
        let mut semantics = EventSemantics::default();
        if is_terminal_type(&request.event_type) {
            let output: AwaitOutput =
                serde_json::from_value(request.payload["await_output"].clone()).expect("output");
            if process.record.is_terminal() {
                return Err(Refusal::Conflict);
            }
            let state = output.terminal_state();
            semantics.terminal = Some(TerminalSemantics::new(state, output.clone()));
            process.record.status = ProcessStatus::from_output(output);
            process.record.wait = None;
        }
        process.record.updated_at_ms = now_ms;
        let seq = process.events.len() as u64 + 1;
        let event = ProcessEvent {
            process_id: PROCESSES[p].to_owned(),
            seq,
            position: 0,
            event_type: request.event_type.clone(),
            payload: request.payload.clone(),
            replay_key: request.replay_key.clone(),
            semantics,
            occurred_at_ms: now_ms,
        };
        if let Some(key) = &request.replay_key {
            process.keys.insert(key.clone(), seq);
        }
        process.events.push(event.clone());
        Ok((event, false))
    }

    pub fn set_wait(&mut self, p: usize, wait: &WaitKind, now_ms: i64) -> Expect<ProcessRecord> {
        let process = self.processes.get_mut(&p).ok_or(Refusal::NotFound)?;
        let WaitKind::Signal { name, .. } = wait else {
            panic!("the model has no rule for the wait {wait:?}");
        };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(Refusal::InvalidInput);
        }
        if process.record.is_terminal() {
            return Err(Refusal::Conflict);
        }
        process.record.wait = Some(WaitState { kind: wait.clone(), since_ms: now_ms });
        process.record.updated_at_ms = now_ms;
        Ok(process.record.clone())
    }

    pub fn clear_wait(&mut self, p: usize, now_ms: i64) -> Expect<ProcessRecord> {
        let process = self.processes.get_mut(&p).ok_or(Refusal::NotFound)?;
        process.record.wait = None;
        process.record.updated_at_ms = now_ms;
        Ok(process.record.clone())
    }

    /// A claim (`reclaim == false`) or a reclaim by an opaque claimant, which never proves a
    /// live holder dead. A new grant is applied once the store has drawn its token.
    pub fn claim(
        &mut self,
        p: usize,
        owner: &LeaseOwner,
        ttl_ms: i64,
        now_ms: i64,
        reclaim: bool,
    ) -> Expect<ExpectClaim> {
        if !self.processes.contains_key(&p) {
            return Err(Refusal::NotFound);
        }
        if !valid_owner(owner) || !valid_ttl(ttl_ms) {
            return Err(Refusal::InvalidInput);
        }
        let lease = self.leases.entry(p).or_default();
        match lease.holder.as_mut().filter(|holder| holder.expires_at_ms > now_ms) {
            Some(holder) if !reclaim && holder.owner.same_incarnation(owner) => {
                holder.expires_at_ms = now_ms + ttl_ms;
                Ok(ExpectClaim::Reentered(holder.clone()))
            }
            Some(holder) => Ok(ExpectClaim::Busy(holder.clone())),
            None => Ok(ExpectClaim::Granted(ProcessLease::new(
                PROCESSES[p],
                owner.clone(),
                "",
                lease.last_fence + 1,
                now_ms,
                now_ms + ttl_ms,
            ))),
        }
    }

    pub fn granted(&mut self, p: usize, lease: ProcessLease) {
        let row = self.leases.entry(p).or_default();
        row.last_fence = lease.fencing_token;
        row.holder = Some(lease);
    }

    pub fn renew(
        &mut self,
        p: usize,
        lease: &ProcessLease,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Expect<ProcessLease> {
        if !valid_owner(&lease.owner) || !valid_ttl(ttl_ms) {
            return Err(Refusal::InvalidInput);
        }
        let row = self.leases.entry(p).or_default();
        match row.holder.as_mut() {
            Some(holder) if same_grant(holder, lease) && holder.expires_at_ms > now_ms => {
                holder.expires_at_ms = now_ms + ttl_ms;
                Ok(lease.clone().expires_at_ms(now_ms + ttl_ms))
            }
            _ => Err(Refusal::LeaseLost),
        }
    }

    /// Releases the lease when it is the current grant (lapsed or not); completing a released
    /// lease that was not granted again since is a no-op.
    pub fn complete_lease(&mut self, p: usize, lease: &ProcessLease) -> Expect<()> {
        let row = self.leases.entry(p).or_default();
        match &row.holder {
            Some(holder)
                if holder.lease_token == lease.lease_token
                    && holder.fencing_token == lease.fencing_token =>
            {
                row.holder = None;
                Ok(())
            }
            None if row.last_fence == lease.fencing_token => Ok(()),
            _ => Err(Refusal::LeaseLost),
        }
    }
}
