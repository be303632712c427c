//! Appending many events at once: what an operation that changes many items owes their
//! streams (a queue's round: an event per queue and kind, and one per failed or released
//! item). On PostgreSQL they go in one `INSERT`, each stream's seqs counted in it from its
//! head; on SQLite, where a statement costs no round trip, one by one as `append_encoded`
//! writes them.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Event, Stream, append_encoded, check_header};
use crate::core::db::{Arg, Db, args};
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

/// Appends `events` in their order, as `append_encoded` appends each (a stream's events take
/// its next seqs in that order, and positions grow in it): one statement on PostgreSQL.
pub(crate) fn append_encoded_all(tx: &mut Tx<'_>, events: &[Encoded<'_>]) -> Result<()> {
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
    let placed = insert_all(tx.db(), tx.tenant(), tx.now_ms(), events)?;
    if let Some(newest) = placed.iter().map(|(_, position)| *position).max() {
        tx.db().event_appended(tx.tenant(), newest);
    }
    if tx.publishing() {
        record_all(tx, events, &placed)?;
    }
    Ok(())
}

/// Inserts the rows in one statement; returns each event's `(seq, position)`, in order.
fn insert_all(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    events: &[Encoded<'_>],
) -> Result<Vec<(i64, i64)>> {
    let kinds: Vec<Option<&str>> = events.iter().map(|e| Some(e.stream.kind.as_str())).collect();
    let ids: Vec<Option<&str>> = events.iter().map(|e| Some(e.stream.id.as_str())).collect();
    let types: Vec<Option<&str>> = events.iter().map(|e| Some(e.event_type)).collect();
    let payloads: Vec<Option<&str>> = events.iter().map(|e| Some(e.encoded)).collect();
    let rows: Vec<(String, String, i64, i64)> = db.query_all(
        "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                                  idem_key, created_at_ms)
         SELECT ?1, e.kind, e.id,
                COALESCE((SELECT max(h.seq) FROM main.events h
                          WHERE h.tenant_id = ?1 AND h.stream_kind = e.kind AND h.stream_id = e.id),
                         (SELECT s.head_seq FROM main.stream_heads s
                          WHERE s.tenant_id = ?1 AND s.stream_kind = e.kind AND s.stream_id = e.id),
                         0)
                  + row_number() OVER (PARTITION BY e.kind, e.id ORDER BY e.n),
                e.type, e.payload, NULL, ?2
         FROM unnest(?3::text[], ?4::text[], ?5::text[], ?6::text[])
              WITH ORDINALITY AS e(kind, id, type, payload, n)
         ORDER BY e.n
         RETURNING stream_kind, stream_id, seq, position",
        args![
            tenant,
            now_ms,
            Arg::Texts(&kinds),
            Arg::Texts(&ids),
            Arg::Texts(&types),
            Arg::Texts(&payloads)
        ],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
    )?;
    in_order(events, rows)
}

/// Each event's `(seq, position)` from the inserted rows: a stream's rows in seq order are its
/// events in their order. Positions must grow in that order too (subscribers read by them).
fn in_order(
    events: &[Encoded<'_>],
    rows: Vec<(String, String, i64, i64)>,
) -> Result<Vec<(i64, i64)>> {
    let mut by_stream: HashMap<(String, String), Vec<(i64, i64)>> = HashMap::new();
    for (kind, id, seq, position) in rows {
        by_stream.entry((kind, id)).or_default().push((seq, position));
    }
    by_stream.values_mut().for_each(|placed| placed.sort_unstable_by(|a, b| b.cmp(a)));
    let mut placed = Vec::with_capacity(events.len());
    for event in events {
        let key = (event.stream.kind.as_str().to_owned(), event.stream.id.clone());
        let next = by_stream.get_mut(&key).and_then(Vec::pop);
        let Some(next) = next else {
            return Err(Error::Postgres("an event insert returned fewer rows than events".into()));
        };
        placed.push(next);
    }
    let grows = placed.windows(2).all(|pair| pair[0].1 < pair[1].1);
    if !grows {
        return Err(Error::Postgres("an event insert took positions out of order".into()));
    }
    Ok(placed)
}

/// Records every event for publishing after the commit.
fn record_all(tx: &mut Tx<'_>, events: &[Encoded<'_>], placed: &[(i64, i64)]) -> Result<()> {
    for (event, (seq, position)) in events.iter().zip(placed) {
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
