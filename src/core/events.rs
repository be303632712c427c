//! The event store the engine is made of: one append-only table for every stream of every
//! domain, and the types publishing and subscriptions need (`Stream`, `Event`, `Appended`).
//!
//! A stream is named by a kind and an id ([`Stream`]). Each event gets a `seq`, dense per stream
//! from 1 and never reused (truncation records the head it removes, so it cannot reset it;
//! only a stream deleted with its owner, a deleted execution, starts again; a pruned
//! process's stream keeps its head),
//! and a global `position` that only grows. The caller's sequence numbers are never
//! trusted. An append with an idempotency key writes once: the same key with the same type and
//! payload returns the first event, with different content it is `Conflict`.
//!
//! Ops: [`Append`], [`Read`], [`ReadAll`], [`Head`], [`Truncate`]; the callers' facade is
//! `Events`, in the event log domain. Domains append to their own streams through `append`
//! here (or `append_encoded`, for text they encoded themselves); a stream a domain owns is
//! closed to callers through the owned-stream checks the domains register (`OwnedStreams`).

use std::fmt;
use std::sync::Arc;

use crate::core::db::{Db, Row, args};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::publish::{Filter, Published};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::hash::content_hash;
use crate::limits::Limits;
use crate::page::{from_sql_int, to_sql_int};

mod many;
pub(crate) use many::{Encoded, InsertAll, append_encoded_all, insert_all_sql};

/// The name of an event stream: a kind and an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Stream {
    kind: StreamKind,
    id: String,
}

/// What a stream belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamKind {
    /// A workflow execution's history.
    Execution,
    /// A registered process's event log.
    Process,
    /// A graph's lifecycle events.
    Graph,
    /// A work queue's item events (enqueued, claimed, completed, ...).
    Queue,
    /// A stream the caller names and uses as it likes.
    Custom,
}

impl StreamKind {
    /// The kind's name as stored: `execution`, `process`, `graph`, `queue` or `custom`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::Execution => "execution",
            StreamKind::Process => "process",
            StreamKind::Graph => "graph",
            StreamKind::Queue => "queue",
            StreamKind::Custom => "custom",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        match text {
            "execution" => Ok(StreamKind::Execution),
            "process" => Ok(StreamKind::Process),
            "graph" => Ok(StreamKind::Graph),
            "queue" => Ok(StreamKind::Queue),
            "custom" => Ok(StreamKind::Custom),
            other => Err(Error::Corrupt(format!("unknown stream kind {other:?} in the event log"))),
        }
    }
}

impl Stream {
    /// The stream of a workflow execution.
    pub fn execution(id: impl AsRef<str>) -> Self {
        Self::new(StreamKind::Execution, id)
    }

    /// The stream of a registered process.
    pub fn process(id: impl AsRef<str>) -> Self {
        Self::new(StreamKind::Process, id)
    }

    /// The stream of a graph.
    pub fn graph(id: impl AsRef<str>) -> Self {
        Self::new(StreamKind::Graph, id)
    }

    /// The stream of a work queue.
    pub fn queue(name: impl AsRef<str>) -> Self {
        Self::new(StreamKind::Queue, name)
    }

    /// A stream of the caller's own.
    pub fn custom(name: impl AsRef<str>) -> Self {
        Self::new(StreamKind::Custom, name)
    }

    /// A stream of any kind. The id is checked when the stream is used.
    pub fn new(kind: StreamKind, id: impl AsRef<str>) -> Self {
        Self { kind, id: id.as_ref().to_owned() }
    }

    /// What the stream belongs to.
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// The stream's id within its kind.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.id)
    }
}

/// One committed event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Event {
    /// Global position in the log: only grows, across every stream and tenant.
    pub position: u64,
    /// The stream the event belongs to.
    pub stream: Stream,
    /// Position within the stream: 1, 2, 3, ... with no gaps at append time.
    pub seq: u64,
    /// What happened, in the appender's vocabulary.
    pub event_type: String,
    /// The event's data.
    pub payload: Value,
    /// The idempotency key it was appended with, if any.
    pub idem_key: Option<String>,
    /// When it was committed (the batch's timestamp), in epoch milliseconds.
    pub created_at_ms: i64,
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Appended {
    /// The event's sequence in its stream.
    pub seq: u64,
    /// The event's global position.
    pub position: u64,
    /// True when an idempotent append found the same event already there and wrote nothing.
    pub existed: bool,
}

/// Appends an event to a stream (see [`Tx::append_event`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Append {
    /// The stream to append to.
    pub stream: Stream,
    /// The event's type.
    pub event_type: String,
    /// The event's data.
    pub payload: Value,
    /// Makes the append idempotent: a second append with this key writes nothing.
    pub idem_key: Option<String>,
}

/// Reads a stream's events with `seq > after_seq`, oldest first, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The stream to read.
    pub stream: Stream,
    /// Read events after this sequence (0 reads from the start).
    pub after_seq: u64,
    /// Most events to return; at most `Limits::page_size_max`.
    pub limit: usize,
}

/// Reads the tenant's events of every stream with `position > after_position`, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAll {
    /// Read events after this position (0 reads from the start).
    pub after_position: u64,
    /// Most events to return; at most `Limits::page_size_max`.
    pub limit: usize,
}

/// The last sequence handed out on a stream (0 for a stream never written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The stream to look at.
    pub stream: Stream,
}

/// The position of the tenant's newest event (0 when it has none): `ReadAll` after it reads
/// only what commits next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastPosition;

/// Deletes a stream's events with `seq < before_seq`; returns how many were deleted. The head
/// stays, so later appends continue the sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// The stream to truncate.
    pub stream: Stream,
    /// Keep events from this sequence on.
    pub before_seq: u64,
}

impl Sealed for Append {}
impl Op for Append {
    type Output = Appended;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.payload)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Appended> {
        check_open_to_callers(tx, &self.stream)?;
        append(tx, &self.stream, &self.event_type, self.payload, self.idem_key.as_deref())
    }
    /// A plain append checks everything, reads the head, then inserts its one row.
    fn single_write(&self) -> bool {
        self.idem_key.is_none()
    }
}

impl Sealed for Read {}
impl Op for Read {
    type Output = Vec<Event>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Event>> {
        check_stream(tx, &self.stream)?;
        tx.limits().check_page(self.limit)?;
        let filter = Filter::Stream(self.stream);
        read_filtered(tx.db(), tx.tenant(), &filter, self.after_seq, self.limit)
    }
}

impl Sealed for ReadAll {}
impl Op for ReadAll {
    type Output = Vec<Event>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Event>> {
        tx.limits().check_page(self.limit)?;
        read_filtered(tx.db(), tx.tenant(), &Filter::All, self.after_position, self.limit)
    }
}

impl Sealed for Head {}
impl Op for Head {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        check_stream(tx, &self.stream)?;
        select_head(tx.db(), tx.tenant(), &self.stream)
    }
}

impl Sealed for LastPosition {}
impl Op for LastPosition {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        select_last_position(tx.db(), tx.tenant())
    }
}

impl Sealed for Truncate {}
impl Op for Truncate {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        check_stream(tx, &self.stream)?;
        check_open_to_callers(tx, &self.stream)?;
        delete_before(tx.db(), tx.tenant(), &self.stream, self.before_seq)
    }
}

/// Appends one event in `tx` and records it for publishing. Every append of the log, this one,
/// `append_under_unused_key` and `append_encoded`, writes through `write`.
pub(crate) fn append(
    tx: &mut Tx<'_>,
    stream: &Stream,
    event_type: &str,
    payload: Value,
    idem_key: Option<&str>,
) -> Result<Appended> {
    let encoded = check_event(tx, stream, event_type, &payload)?;
    let hash = match idem_key {
        Some(key) => {
            tx.limits().check_id("idempotency key", key)?;
            let hash = event_hash(event_type, &payload);
            // Before the look-up: another connection's append under the same key then either
            // committed already or waits for this one.
            tx.db().lock_tenant_writes(tx.tenant())?;
            if let Some(existing) = select_by_key(tx.db(), tx.tenant(), stream, key)? {
                return replay(&existing, &hash, key);
            }
            Some(hash)
        }
        None => None,
    };
    let row = NewRow { stream, event_type, encoded: &encoded, idem_key, hash: hash.as_deref() };
    write(tx, &row, || Ok(payload))
}

/// Appends one event whose payload the caller encoded itself (the store's own bookkeeping
/// events, written many per operation): no idempotency key, and the text is decoded again only
/// while the store publishes (some subscriber is live). `encoded` must be a JSON document, as
/// serde_json writes it, nested no deeper than the store's own entries are (their values are
/// flat: a queue's `{"items": [{..}]}` is three deep): it is stored as it is, and only its size
/// is checked.
pub(crate) fn append_encoded(
    tx: &mut Tx<'_>,
    stream: &Stream,
    event_type: &str,
    encoded: &str,
) -> Result<Appended> {
    check_header(tx, stream, event_type)?;
    tx.limits().check_payload_bytes("event payload bytes", encoded)?;
    debug_assert!(serde_json::from_str::<Value>(encoded).is_ok(), "not JSON: {encoded}");
    let row = NewRow { stream, event_type, encoded, idem_key: None, hash: None };
    write(tx, &row, || Ok(serde_json::from_str(encoded)?))
}

/// Appends one event under `idem_key`, which the caller has just found unused with
/// [`keyed_event`] in this transaction (so it is not looked up again).
pub(crate) fn append_under_unused_key(
    tx: &mut Tx<'_>,
    stream: &Stream,
    event_type: &str,
    payload: Value,
    idem_key: &str,
) -> Result<Appended> {
    let encoded = check_event(tx, stream, event_type, &payload)?;
    tx.limits().check_id("idempotency key", idem_key)?;
    let hash = event_hash(event_type, &payload);
    let key = Some(idem_key);
    let row = NewRow { stream, event_type, encoded: &encoded, idem_key: key, hash: Some(&hash) };
    write(tx, &row, || Ok(payload))
}

/// Checks an event's stream, type and payload; returns the encoded payload.
fn check_event(tx: &Tx<'_>, stream: &Stream, event_type: &str, payload: &Value) -> Result<String> {
    check_header(tx, stream, event_type)?;
    let encoded = serde_json::to_string(payload)?;
    tx.limits().check_payload("event payload bytes", &encoded)?;
    Ok(encoded)
}

/// Checks an event's stream and type.
fn check_header(tx: &Tx<'_>, stream: &Stream, event_type: &str) -> Result<()> {
    check_stream(tx, stream)?;
    tx.limits().check_id("event type", event_type)
}

/// What an idempotency key remembers of the event it appended.
fn event_hash(event_type: &str, payload: &Value) -> String {
    content_hash(&json!({ "type": event_type, "payload": payload }))
}

/// Inserts the row (and its key), and records the event for publishing; `payload` is asked for
/// only then.
fn write(
    tx: &mut Tx<'_>,
    row: &NewRow<'_>,
    payload: impl FnOnce() -> Result<Value>,
) -> Result<Appended> {
    let (seq, position) = insert(tx.db(), tx.tenant(), tx.now_ms(), row)?;
    insert_key(tx.db(), tx.tenant(), row, seq, position)?;
    if !tx.publishing() {
        // Nobody is live: a subscriber that comes later reads the event from the table.
        return Ok(Appended { seq, position, existed: false });
    }
    let event = Event {
        position,
        stream: row.stream.clone(),
        seq,
        event_type: row.event_type.to_owned(),
        payload: payload()?,
        idem_key: row.idem_key.map(str::to_owned),
        created_at_ms: tx.now_ms(),
    };
    let tenant: Arc<str> = Arc::clone(tx.tenant_arc());
    tx.record(Published { tenant, event });
    Ok(Appended { seq, position, existed: false })
}

/// Reads the tenant's events matching `filter` past the cursor `after`, in cursor order.
pub(crate) fn read_filtered(
    db: Db<'_>,
    tenant: &str,
    filter: &Filter,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>> {
    let after = to_sql_int(after);
    let limit = crate::page::sql_limit(limit);
    match filter {
        Filter::Stream(stream) => db.query_all(
            "SELECT position, stream_kind, stream_id, seq, event_type, payload, idem_key,
                        created_at_ms
                 FROM main.events
                 WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3 AND seq > ?4
                 ORDER BY seq LIMIT ?5",
            args![tenant, stream.kind.as_str(), stream.id, after, limit],
            event_from_row,
        ),
        Filter::All => db.query_all(
            "SELECT position, stream_kind, stream_id, seq, event_type, payload, idem_key,
                    created_at_ms
             FROM main.events
             WHERE tenant_id = ?1 AND position > ?2
             ORDER BY position LIMIT ?3",
            args![tenant, after, limit],
            event_from_row,
        ),
    }
}

/// The event appended under idempotency key `key`, when its type and payload are these
/// (`None` when the key is unused; `Conflict` when it appended something else, or when the
/// event it appended has been truncated away).
pub(crate) fn keyed_event(
    db: Db<'_>,
    tenant: &str,
    stream: &Stream,
    key: &str,
    event_type: &str,
    payload: &Value,
) -> Result<Option<Event>> {
    let Some(existing) = select_by_key(db, tenant, stream, key)? else {
        return Ok(None);
    };
    replay(&existing, &event_hash(event_type, payload), key)?;
    let found = read_stream(db, tenant, stream, existing.seq.saturating_sub(1), 1)?;
    match found.into_iter().next() {
        Some(event) if event.seq == existing.seq => Ok(Some(event)),
        _ => Err(Error::Conflict(format!(
            "the event appended under idempotency key {key:?} has been truncated"
        ))),
    }
}

/// A stream's events after `after_seq`, oldest first, at most `limit`.
pub(crate) fn read_stream(
    db: Db<'_>,
    tenant: &str,
    stream: &Stream,
    after_seq: u64,
    limit: usize,
) -> Result<Vec<Event>> {
    read_filtered(db, tenant, &Filter::Stream(stream.clone()), after_seq, limit)
}

/// The last `limit` events of a stream, oldest first.
pub(crate) fn read_recent(
    db: Db<'_>,
    tenant: &str,
    stream: &Stream,
    limit: usize,
) -> Result<Vec<Event>> {
    let mut events = db.query_all(
        "SELECT position, stream_kind, stream_id, seq, event_type, payload, idem_key,
                created_at_ms
         FROM main.events
         WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3
         ORDER BY seq DESC LIMIT ?4",
        args![tenant, stream.kind.as_str(), stream.id, crate::page::sql_limit(limit)],
        event_from_row,
    )?;
    events.reverse();
    Ok(events)
}

/// How many events of `event_type` the stream holds up to and including `upto_seq`.
pub(crate) fn count_through(
    db: Db<'_>,
    tenant: &str,
    stream: &Stream,
    event_type: &str,
    upto_seq: u64,
) -> Result<u64> {
    let count: i64 = db.query_one(
        "SELECT count(*) FROM main.events
             WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3 AND seq <= ?4
               AND event_type = ?5",
        args![tenant, stream.kind.as_str(), stream.id, to_sql_int(upto_seq), event_type],
        |row| row.get(0),
    )?;
    Ok(from_sql_int(count))
}

/// Deletes a stream's events and keys but records its head, so that a stream used again (a
/// process id registered again after a prune) continues its numbering and a subscriber's
/// cursor on it stays valid; returns how many events went.
pub(crate) fn delete_history(db: Db<'_>, tenant: &str, stream: &Stream) -> Result<u64> {
    let deleted = delete_before(db, tenant, stream, u64::MAX)?;
    db.execute(
        "DELETE FROM main.event_keys WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3",
        args![tenant, stream.kind.as_str(), stream.id],
    )?;
    Ok(deleted)
}

/// Whether the stream holds any event.
pub(crate) fn has_events(db: Db<'_>, tenant: &str, stream: &Stream) -> Result<bool> {
    let found: Option<i64> = db.query_opt(
        "SELECT 1 FROM main.events
             WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3 LIMIT 1",
        args![tenant, stream.kind.as_str(), stream.id],
        |row| row.get(0),
    )?;
    Ok(found.is_some())
}

/// Deletes a stream whole, with its keys and its recorded head, when its owner is deleted for
/// good (an execution: its id is never used again); returns how many events went.
pub(crate) fn delete_stream(db: Db<'_>, tenant: &str, stream: &Stream) -> Result<u64> {
    let kind = stream.kind.as_str();
    let args = args![tenant, kind, stream.id];
    let deleted = db.execute(
        "DELETE FROM main.events WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3",
        args,
    )?;
    db.execute(
        "DELETE FROM main.event_keys WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3",
        args,
    )?;
    db.execute("DELETE FROM main.stream_heads WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3", args)?;
    Ok(deleted as u64)
}

/// Refuses a caller's append or truncation on a stream a domain owns (as the owned-stream
/// checks the domains registered say: today a registered process's and an existing
/// execution's), which only that domain writes, keeping its records in step.
pub(crate) fn check_open_to_callers(tx: &Tx<'_>, stream: &Stream) -> Result<()> {
    if tx.stream_is_owned(stream)? {
        return Err(Error::InvalidInput(format!(
            "{stream} belongs to its domain (a registered process, an execution, ...): write \
             it through that domain (store.processes(), store.workflows(), ...)"
        )));
    }
    Ok(())
}

/// A domain's check of whether `stream` (of `tenant`) is one only that domain may write: a
/// registered process's, an existing execution's. Registered in `crate::domains`.
pub(crate) type OwnedStreams = fn(Db<'_>, &str, &Stream) -> Result<bool>;

fn check_stream(tx: &Tx<'_>, stream: &Stream) -> Result<()> {
    tx.limits().check_id("stream id", &stream.id)
}

/// An existing event found by its idempotency key.
struct Existing {
    seq: u64,
    position: u64,
    hash: String,
}

/// The outcome of appending again with a key already used.
fn replay(existing: &Existing, hash: &str, key: &str) -> Result<Appended> {
    if existing.hash != hash {
        return Err(Error::Conflict(format!(
            "idempotency key {key:?} was used for a different event"
        )));
    }
    Ok(Appended { seq: existing.seq, position: existing.position, existed: true })
}

/// The columns of a new event row.
struct NewRow<'r> {
    stream: &'r Stream,
    event_type: &'r str,
    encoded: &'r str,
    idem_key: Option<&'r str>,
    hash: Option<&'r str>,
}

fn select_by_key(db: Db<'_>, tenant: &str, stream: &Stream, key: &str) -> Result<Option<Existing>> {
    db.query_opt(
        "SELECT seq, position, payload_hash FROM main.event_keys
         WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3 AND idem_key = ?4",
        args![tenant, stream.kind.as_str(), stream.id, key],
        |row| {
            Ok(Existing {
                seq: from_sql_int(row.get(0)?),
                position: from_sql_int(row.get(1)?),
                hash: row.get(2)?,
            })
        },
    )
}

/// Remembers which event an idempotency key appended.
fn insert_key(db: Db<'_>, tenant: &str, row: &NewRow<'_>, seq: u64, position: u64) -> Result<()> {
    let (Some(key), Some(hash)) = (row.idem_key, row.hash) else {
        return Ok(());
    };
    db.execute("INSERT INTO main.event_keys (tenant_id, stream_kind, stream_id, idem_key, payload_hash, seq,
                                 position)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", args![
        tenant,
        row.stream.kind.as_str(),
        row.stream.id,
        key,
        hash,
        to_sql_int(seq),
        to_sql_int(position)
    ])?;
    Ok(())
}

/// The last sequence of stream (`?1` tenant, `?2` kind, `?3` id), as an SQL expression: its
/// newest event's, or (for a stream truncated to nothing) the head the truncation recorded, or
/// 0. Both are index seeks.
macro_rules! head_seq {
    () => {
        "COALESCE((SELECT max(seq) FROM main.events
                   WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3),
                  (SELECT head_seq FROM main.stream_heads
                   WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3),
                  0)"
    };
}

/// Takes the stream's next sequence and inserts the row; returns `(seq, position)`. Only the
/// event row is written: the sequence is read from the events themselves (see `select_head`).
fn insert(db: Db<'_>, tenant: &str, now_ms: i64, row: &NewRow<'_>) -> Result<(u64, u64)> {
    db.lock_tenant_writes(tenant)?;
    let (seq, position) = if db.is_postgres() {
        insert_counting(db, tenant, now_ms, row)?
    } else {
        let seq = to_sql_int(select_head(db, tenant, row.stream)?) + 1;
        (seq, insert_at(db, tenant, now_ms, row, seq)?)
    };
    db.event_appended(tenant, position);
    Ok((from_sql_int(seq), from_sql_int(position)))
}

/// Inserts the row at `seq`; returns its position, the rowid. (`RETURNING` would say so in
/// SQL, but SQLite builds a temporary table for every `RETURNING` statement.)
fn insert_at(db: Db<'_>, tenant: &str, now_ms: i64, row: &NewRow<'_>, seq: i64) -> Result<i64> {
    db.insert_rowid(
        "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                                  idem_key, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        args![
            tenant,
            row.stream.kind.as_str(),
            row.stream.id,
            seq,
            row.event_type,
            row.encoded,
            row.idem_key,
            now_ms
        ],
    )
}

/// Inserts the row after the stream's head (`select_head`, read in the same statement: the
/// tenant's writers are held, so nobody else moves it) and returns its `(seq, position)`: one
/// round trip on PostgreSQL.
fn insert_counting(db: Db<'_>, tenant: &str, now_ms: i64, row: &NewRow<'_>) -> Result<(i64, i64)> {
    db.query_one(
        concat!(
            "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                                  idem_key, created_at_ms)
         VALUES (?1, ?2, ?3,
                 ",
            head_seq!(),
            " + 1,
                 ?4, ?5, ?6, ?7)
         RETURNING seq, position"
        ),
        args![
            tenant,
            row.stream.kind.as_str(),
            row.stream.id,
            row.event_type,
            row.encoded,
            row.idem_key,
            now_ms
        ],
        |found| Ok((found.get(0)?, found.get(1)?)),
    )
}

/// The stream's last sequence: its newest event's, or (for a stream truncated to nothing) the
/// head the truncation recorded. Both are index seeks.
pub(crate) fn select_head(db: Db<'_>, tenant: &str, stream: &Stream) -> Result<u64> {
    let head: i64 = db.query_one(
        concat!("SELECT ", head_seq!()),
        args![tenant, stream.kind.as_str(), stream.id],
        |row| row.get(0),
    )?;
    Ok(from_sql_int(head))
}

/// The position of the tenant's newest event, 0 for none.
fn select_last_position(db: Db<'_>, tenant: &str) -> Result<u64> {
    let last: Option<i64> = db.query_one(
        "SELECT max(position) FROM main.events WHERE tenant_id = ?1",
        args![tenant],
        |row| row.get(0),
    )?;
    Ok(last.map_or(0, from_sql_int))
}

/// Deletes the events before `before_seq`, first recording the stream's head so that a stream
/// truncated to nothing still continues its sequence.
fn delete_before(db: Db<'_>, tenant: &str, stream: &Stream, before_seq: u64) -> Result<u64> {
    let head = select_head(db, tenant, stream)?;
    if head > 0 {
        db.execute(
            "INSERT INTO main.stream_heads (tenant_id, stream_kind, stream_id, head_seq)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (tenant_id, stream_kind, stream_id) DO UPDATE SET head_seq = ?4",
            args![tenant, stream.kind.as_str(), stream.id, to_sql_int(head)],
        )?;
    }
    let deleted = db.execute(
        "DELETE FROM main.events
             WHERE tenant_id = ?1 AND stream_kind = ?2 AND stream_id = ?3 AND seq < ?4",
        args![tenant, stream.kind.as_str(), stream.id, to_sql_int(before_seq)],
    )?;
    Ok(deleted as u64)
}

fn event_from_row(row: &Row<'_>) -> Result<Event> {
    let kind: String = row.get(1)?;
    let payload: String = row.get(5)?;
    Ok(Event {
        position: from_sql_int(row.get(0)?),
        stream: Stream { kind: StreamKind::parse(&kind)?, id: row.get(2)? },
        seq: from_sql_int(row.get(3)?),
        event_type: row.get(4)?,
        payload: serde_json::from_str(&payload)?,
        idem_key: row.get(6)?,
        created_at_ms: row.get(7)?,
    })
}
