//! Appending many events at once: what an operation that changes many items owes their
//! streams (a queue's round: an event per queue and kind, and one per failed or released
//! item). On PostgreSQL they go in one `INSERT`, each stream's seqs counted in it from its
//! head; on SQLite, where a statement costs no round trip, one by one as `append_encoded`
//! writes them.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Event, Stream, append_encoded, check_header};
use crate::core::db::{Arg, Db};
use crate::core::publish::Published;
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::page::from_sql_int;

/// An event whose payload its domain encoded itself (see `append_encoded` for what the text
/// must be).
pub(crate) struct Encoded<'a> {
    /// The stream it goes to.
    pub(crate) stream: Stream,
    /// Its type.
    pub(crate) event_type: &'static str,
    /// Its payload, a JSON document as serde_json writes it.
    pub(crate) encoded: &'a str,
}

/// The statements that insert events in one go on PostgreSQL (an [`InsertAll`]), with
/// `$filter` (SQL starting `AND`, over `e.kind`, `e.id` and the tenant `?1`) leaving out the
/// events of whole streams. Each stream's events take its next seqs in their order, positions
/// grow in it, and it returns each inserted row's stream, seq and position. `many` reads the
/// events from arrays; `one` and `two` read one or two events from plain values, as many rows
/// for the planner whether its plan is generic or not, so the server keeps one plan of them
/// (an array's hundred guessed rows kept it planning every call; a `complete_and_claim` owes
/// two events).
macro_rules! insert_all_sql {
    ($filter:literal) => {
        $crate::core::events::InsertAll {
            many: $crate::core::events::insert_all_sql!(
                @rows "unnest(?3::text[], ?4::text[], ?5::text[], ?6::text[])
                  WITH ORDINALITY AS e(kind, id, type, payload, n)",
                $filter
            ),
            one: $crate::core::events::insert_all_sql!(
                @rows "(SELECT ?3::text, ?4::text, ?5::text, ?6::text, 1::bigint)
                  AS e(kind, id, type, payload, n)",
                $filter
            ),
            two: $crate::core::events::insert_all_sql!(
                @rows "(SELECT ?3::text, ?4::text, ?5::text, ?6::text, 1::bigint
                  UNION ALL SELECT ?7::text, ?8::text, ?9::text, ?10::text, 2::bigint)
                  AS e(kind, id, type, payload, n)",
                $filter
            ),
        }
    };
    (@rows $rows:literal, $filter:literal) => {
        concat!(
            "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                                      idem_key, created_at_ms)
             SELECT ?1, e.kind, e.id,
                    COALESCE((SELECT max(h.seq) FROM main.events h
                              WHERE h.tenant_id = ?1 AND h.stream_kind = e.kind
                                AND h.stream_id = e.id),
                             (SELECT s.head_seq FROM main.stream_heads s
                              WHERE s.tenant_id = ?1 AND s.stream_kind = e.kind
                                AND s.stream_id = e.id),
                             0)
                      + row_number() OVER (PARTITION BY e.kind, e.id ORDER BY e.n),
                    e.type, e.payload, NULL, ?2
             FROM ",
            $rows,
            "
             WHERE TRUE ",
            $filter,
            " ORDER BY e.n
             RETURNING stream_kind, stream_id, seq, position"
        )
    };
}
pub(crate) use insert_all_sql;

/// The two texts of an `insert_all_sql!` statement: for many events, and for one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InsertAll {
    /// Events from arrays.
    pub(crate) many: &'static str,
    /// One event from plain values.
    pub(crate) one: &'static str,
    /// Two events from plain values.
    pub(crate) two: &'static str,
}

/// Appends `events` in their order, as `append_encoded` appends each (a stream's events take
/// its next seqs in that order, and positions grow in it): on PostgreSQL one statement, `sql`
/// (made by `insert_all_sql!`, whose filter may leave out whole streams: those are not
/// appended); on SQLite every event is appended (a caller filters first).
pub(crate) fn append_encoded_all(
    tx: &mut Tx<'_>,
    events: &[Encoded<'_>],
    sql: InsertAll,
) -> Result<()> {
    if !tx.db().is_postgres() {
        for event in events {
            append_encoded(tx, &event.stream, event.event_type, event.encoded)?;
        }
        return Ok(());
    }
    if events.is_empty() {
        return Ok(());
    }
    for event in events {
        check_header(tx, &event.stream, event.event_type)?;
        tx.limits().check_payload_bytes("event payload bytes", event.encoded)?;
        debug_assert!(serde_json::from_str::<Value>(event.encoded).is_ok(), "not JSON");
    }
    tx.db().lock_tenant_writes(tx.tenant())?;
    // Nobody reads where they go but the tenant's head: they may go with the next statement.
    let defer = !tx.publishing();
    let Some(placed) = insert_all(tx.db(), tx.tenant(), tx.now_ms(), events, sql, defer)? else {
        return Ok(());
    };
    if let Some(newest) = placed.iter().flatten().map(|(_, position)| *position).max() {
        tx.db().event_appended(tx.tenant(), newest);
    }
    if tx.publishing() {
        record_all(tx, events, &placed)?;
    }
    Ok(())
}

/// Where an event went: its `(seq, position)`, or `None` when the statement's filter left it
/// out.
type Placed = Option<(i64, i64)>;

/// Inserts the rows in one statement; returns each event's `(seq, position)`, in order
/// (`None` for one the statement's filter left out), or, if `defer` and the engine sends the
/// statement with the transaction's next one (`Db::defer_events`), `None`.
fn insert_all(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    events: &[Encoded<'_>],
    sql: InsertAll,
    defer: bool,
) -> Result<Option<Vec<Placed>>> {
    let (text, values) = match events {
        [one] => (sql.one, plain_args(one).to_vec()),
        [first, second] => (sql.two, [plain_args(first), plain_args(second)].concat()),
        _ => return insert_many(db, tenant, now_ms, events, sql.many, defer),
    };
    let args = [&[Arg::Text(tenant), Arg::Int(now_ms)][..], &values].concat();
    insert_placed(db, tenant, events, text, &args, defer)
}

/// `insert_all` of events given as arrays.
fn insert_many(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    events: &[Encoded<'_>],
    sql: &str,
    defer: bool,
) -> Result<Option<Vec<Placed>>> {
    let kinds: Vec<Option<&str>> = events.iter().map(|e| Some(e.stream.kind.as_str())).collect();
    let ids: Vec<Option<&str>> = events.iter().map(|e| Some(e.stream.id.as_str())).collect();
    let types: Vec<Option<&str>> = events.iter().map(|e| Some(e.event_type)).collect();
    let payloads: Vec<Option<&str>> = events.iter().map(|e| Some(e.encoded)).collect();
    let args = [
        Arg::Text(tenant),
        Arg::Int(now_ms),
        Arg::Texts(&kinds),
        Arg::Texts(&ids),
        Arg::Texts(&types),
        Arg::Texts(&payloads),
    ];
    insert_placed(db, tenant, events, sql, &args, defer)
}

/// Runs an `insert_all_sql!` text with its `args` (or, if `defer`, hands it to the engine to
/// send with the transaction's next statement); returns where each event went.
fn insert_placed(
    db: Db<'_>,
    tenant: &str,
    events: &[Encoded<'_>],
    sql: &str,
    args: &[Arg<'_>],
    defer: bool,
) -> Result<Option<Vec<Placed>>> {
    if defer && db.defer_events(sql, args, tenant)? {
        return Ok(None);
    }
    let rows: Vec<(String, String, i64, i64)> =
        db.query_all(sql, args, |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
    in_order(events, rows).map(Some)
}

/// An event's kind, stream id, type and payload, as the arguments of `insert_all_sql!`'s texts
/// for one or two events.
fn plain_args<'a>(event: &'a Encoded<'_>) -> [Arg<'a>; 4] {
    let stream = &event.stream;
    [stream.kind.as_str(), stream.id.as_str(), event.event_type, event.encoded].map(Arg::Text)
}

/// Each event's `(seq, position)` from the inserted rows (`None` for a stream left out): a
/// stream's rows in seq order are its events in their order. Positions must grow in that order
/// too (subscribers read by them).
fn in_order(
    events: &[Encoded<'_>],
    rows: Vec<(String, String, i64, i64)>,
) -> Result<Vec<Option<(i64, i64)>>> {
    let mut by_stream: HashMap<(String, String), Vec<(i64, i64)>> = HashMap::new();
    for (kind, id, seq, position) in rows {
        by_stream.entry((kind, id)).or_default().push((seq, position));
    }
    by_stream.values_mut().for_each(|placed| placed.sort_unstable_by(|a, b| b.cmp(a)));
    let mut placed = Vec::with_capacity(events.len());
    for event in events {
        let key = (event.stream.kind.as_str().to_owned(), event.stream.id.clone());
        placed.push(match by_stream.get_mut(&key) {
            Some(rows) => Some(rows.pop().ok_or_else(|| {
                Error::Postgres("an event insert returned fewer rows than events".into())
            })?),
            None => None,
        });
    }
    let positions: Vec<i64> = placed.iter().flatten().map(|(_, position)| *position).collect();
    if !positions.windows(2).all(|pair| pair[0] < pair[1]) {
        return Err(Error::Postgres("an event insert took positions out of order".into()));
    }
    Ok(placed)
}

/// Records every event for publishing after the commit.
fn record_all(
    tx: &mut Tx<'_>,
    events: &[Encoded<'_>],
    placed: &[Option<(i64, i64)>],
) -> Result<()> {
    for (event, placed) in events.iter().zip(placed) {
        let Some((seq, position)) = placed else { continue };
        let published = Event {
            position: from_sql_int(*position),
            stream: event.stream.clone(),
            seq: from_sql_int(*seq),
            event_type: event.event_type.to_owned(),
            payload: serde_json::from_str(event.encoded)?,
            idem_key: None,
            created_at_ms: tx.now_ms(),
        };
        let tenant: Arc<str> = Arc::clone(tx.tenant_arc());
        tx.record(Published { tenant, event: published });
    }
    Ok(())
}
