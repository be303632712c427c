//! The queue's set-based statements, PostgreSQL's only: a round's claims, completions,
//! failures, releases and renewals, and a batch's new items, each one statement over arrays
//! (`unnest`) whatever the number of items, where SQLite (no round trips) runs `sql.rs`'s
//! statements item by item.
//!
//! As there, every lease-holder write carries the fence and the `claimed` status in its own
//! `WHERE`, and what moves an item into a finished status writes its count (`queue_counts`)
//! in the same statement.

use crate::core::db::{Arg, Db, Row, args};
use crate::error::Result;

use super::sql::{ItemRow, item_columns, item_from_row};

/// Texts as an array argument's elements.
pub(super) fn texts<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Option<&'a str>> {
    values.into_iter().map(Some).collect()
}

/// Claims up to `limit` due items of `queues` (each queue read in claim order through its
/// index, the heads merged), skipping rows another transaction holds; returns them as claimed,
/// in no particular order.
pub(super) fn claim(
    db: Db<'_>,
    tenant: &str,
    queues: &[String],
    worker_id: &str,
    now_ms: i64,
    expires_at_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    let queues = texts(queues.iter().map(String::as_str));
    db.query_all(
        concat!(
            "WITH due AS (
               SELECT d.item_id AS due_id
               FROM unnest(?2::text[]) AS n(queue)
               CROSS JOIN LATERAL (
                 SELECT item_id, priority, run_at_ms FROM main.queue_items
                 WHERE tenant_id = ?1 AND queue = n.queue AND status = 'pending'
                   AND run_at_ms <= ?3
                 ORDER BY priority DESC, run_at_ms, item_id LIMIT ?4
                 FOR UPDATE SKIP LOCKED) AS d
               ORDER BY d.priority DESC, d.run_at_ms, d.item_id LIMIT ?4)
             UPDATE main.queue_items AS q
             SET status = 'claimed', attempt = q.attempt + 1, fence = q.fence + 1,
                 worker_id = ?5, lease_expires_at_ms = ?6, updated_at_ms = ?3
             FROM due WHERE q.tenant_id = ?1 AND q.item_id = due.due_id
             RETURNING ",
            item_columns!()
        ),
        args![tenant, Arg::Texts(&queues), now_ms, limit as i64, worker_id, expires_at_ms],
        item_from_row,
    )
}

/// Whether any of `queues` is paused or limited (`queue_settings`): their claims then go
/// item by item, each under the claiming statement's gate, instead of all in one.
pub(super) fn any_gated(db: Db<'_>, tenant: &str, queues: &[String]) -> Result<bool> {
    let queues = texts(queues.iter().map(String::as_str));
    let gated: Option<i64> = db.query_value(
        "SELECT 1 FROM main.queue_settings
         WHERE tenant_id = ?1 AND queue = ANY(?2::text[])
           AND (paused = 1 OR concurrency_max IS NOT NULL)
         LIMIT 1",
        args![tenant, Arg::Texts(&queues)],
    )?;
    Ok(gated.is_some())
}

/// A held item's id, the fence of its holder's claim, and (for a completion or failure) text.
pub(super) struct Fenced<'a> {
    pub(super) id: &'a str,
    pub(super) fence: u64,
}

/// The ids and fences of `held` as array arguments' elements.
fn ids_and_fences<'a>(held: &[Fenced<'a>]) -> (Vec<Option<&'a str>>, Vec<i64>) {
    (texts(held.iter().map(|h| h.id)), held.iter().map(|h| h.fence as i64).collect())
}

/// What a set-based write returned of an item it changed: its id, queue and attempt.
pub(super) struct Changed {
    pub(super) id: String,
    pub(super) queue: String,
    pub(super) attempt: u32,
}

fn changed(row: &Row<'_>) -> Result<Changed> {
    Ok(Changed { id: row.get(0)?, queue: row.get(1)?, attempt: row.get(2)? })
}

/// Completes the held items (each with its encoded result) whose fence still holds a live
/// lease, and counts them per queue; returns those it completed.
pub(super) fn complete(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    held: &[Fenced<'_>],
    results: &[&str],
) -> Result<Vec<Changed>> {
    let (ids, fences) = ids_and_fences(held);
    let results = texts(results.iter().copied());
    db.query_all(
        "WITH done AS (
           UPDATE main.queue_items AS q
           SET status = 'completed', result = u.result, worker_id = NULL,
               lease_expires_at_ms = NULL, updated_at_ms = ?2, finished_at_ms = ?2
           FROM unnest(?3::text[], ?4::bigint[], ?5::text[]) AS u(id, fence, result)
           WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
             AND q.status = 'claimed' AND q.lease_expires_at_ms > ?2
           RETURNING q.item_id, q.queue, q.attempt),
         counted AS (
           INSERT INTO main.queue_counts AS c (tenant_id, queue, status, total)
           SELECT ?1, queue, 'completed', count(*) FROM done GROUP BY queue
           ON CONFLICT (tenant_id, queue, status) DO UPDATE SET total = c.total + excluded.total)
         SELECT item_id, queue, attempt FROM done",
        args![tenant, now_ms, Arg::Texts(&ids), Arg::Ints(&fences), Arg::Texts(&results)],
        changed,
    )
}

/// A failed attempt to record: retry at `run_at_ms`, or (`dead`) dead-letter.
pub(super) struct Failure<'a> {
    pub(super) held: Fenced<'a>,
    pub(super) dead: bool,
    pub(super) run_at_ms: i64,
    pub(super) error: &'a str,
}

/// Ends the failed attempts of claimed items (a retry, or a dead letter counted per queue);
/// returns the ids it changed.
pub(super) fn fail(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    failures: &[Failure<'_>],
) -> Result<Vec<String>> {
    let ids = texts(failures.iter().map(|f| f.held.id));
    let fences: Vec<i64> = failures.iter().map(|f| f.held.fence as i64).collect();
    let statuses = texts(failures.iter().map(|f| if f.dead { "dead" } else { "pending" }));
    let run_ats: Vec<i64> = failures.iter().map(|f| f.run_at_ms).collect();
    let errors = texts(failures.iter().map(|f| f.error));
    db.query_all(
        "WITH failed AS (
           UPDATE main.queue_items AS q
           SET status = u.status, run_at_ms = u.run_at_ms, last_error = u.error,
               worker_id = NULL, lease_expires_at_ms = NULL, updated_at_ms = ?2,
               finished_at_ms = CASE WHEN u.status = 'dead' THEN ?2 ELSE q.finished_at_ms END
           FROM unnest(?3::text[], ?4::bigint[], ?5::text[], ?6::bigint[], ?7::text[])
                AS u(id, fence, status, run_at_ms, error)
           WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
             AND q.status = 'claimed'
           RETURNING q.item_id, q.queue, q.status),
         counted AS (
           INSERT INTO main.queue_counts AS c (tenant_id, queue, status, total)
           SELECT ?1, queue, 'dead', count(*) FROM failed WHERE status = 'dead' GROUP BY queue
           ON CONFLICT (tenant_id, queue, status) DO UPDATE SET total = c.total + excluded.total)
         SELECT item_id FROM failed",
        args![
            tenant,
            now_ms,
            Arg::Texts(&ids),
            Arg::Ints(&fences),
            Arg::Texts(&statuses),
            Arg::Ints(&run_ats),
            Arg::Texts(&errors)
        ],
        |row| row.get(0),
    )
}

/// Returns the held items whose fence still holds a live lease to pending, their attempt
/// refunded; returns those it released (with the attempt they had).
pub(super) fn release(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    held: &[Fenced<'_>],
) -> Result<Vec<Changed>> {
    let (ids, fences) = ids_and_fences(held);
    db.query_all(
        "UPDATE main.queue_items AS q
         SET status = 'pending', attempt = q.attempt - 1, worker_id = NULL,
             lease_expires_at_ms = NULL, updated_at_ms = ?2
         FROM unnest(?3::text[], ?4::bigint[]) AS u(id, fence)
         WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
           AND q.status = 'claimed' AND q.lease_expires_at_ms > ?2
         RETURNING q.item_id, q.queue, q.attempt + 1",
        args![tenant, now_ms, Arg::Texts(&ids), Arg::Ints(&fences)],
        changed,
    )
}

/// Moves the live leases of the held items to `expires_at_ms`; returns the ids and fences it
/// renewed (a list may name an item twice, with a stale fence once).
pub(super) fn renew(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    expires_at_ms: i64,
    held: &[Fenced<'_>],
) -> Result<Vec<(String, i64)>> {
    let (ids, fences) = ids_and_fences(held);
    db.query_all(
        "UPDATE main.queue_items AS q SET lease_expires_at_ms = ?3, updated_at_ms = ?2
         FROM unnest(?4::text[], ?5::bigint[]) AS u(id, fence)
         WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
           AND q.status = 'claimed' AND q.lease_expires_at_ms > ?2
         RETURNING q.item_id, q.fence",
        args![tenant, now_ms, expires_at_ms, Arg::Texts(&ids), Arg::Ints(&fences)],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}

/// The items `ids` of the tenant (those that exist), in no particular order.
pub(super) fn select_items(db: Db<'_>, tenant: &str, ids: &[&str]) -> Result<Vec<ItemRow>> {
    let ids = texts(ids.iter().copied());
    db.query_all(
        concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items WHERE tenant_id = ?1 AND item_id = ANY(?2::text[])"
        ),
        args![tenant, Arg::Texts(&ids)],
        item_from_row,
    )
}

/// The columns of plain new items (no dedupe key, unique key, tags, metadata or run timeout),
/// one array each (see `insert`).
#[derive(Default)]
pub(super) struct NewRows<'a> {
    pub(super) ids: Vec<Option<&'a str>>,
    pub(super) queues: Vec<Option<&'a str>>,
    pub(super) payloads: Vec<Option<&'a str>>,
    pub(super) priorities: Vec<i64>,
    pub(super) run_ats: Vec<i64>,
    pub(super) max_attempts: Vec<i64>,
    pub(super) backoff_bases: Vec<i64>,
    pub(super) backoff_maxes: Vec<i64>,
    pub(super) execution_ids: Vec<Option<&'a str>>,
    pub(super) node_ids: Vec<Option<&'a str>>,
}

/// Inserts new plain pending items (see `NewRows`), in their order.
pub(super) fn insert(db: Db<'_>, tenant: &str, now_ms: i64, rows: &NewRows<'_>) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_items (tenant_id, item_id, queue, payload, payload_hash,
             priority, run_at_ms, attempt, max_attempts, backoff_base_ms, backoff_max_ms,
             dedupe_key, execution_id, node_id, status, fence, created_at_ms, updated_at_ms)
         SELECT ?1, u.id, u.queue, u.payload, NULL, u.priority, u.run_at_ms, 0, u.max_attempts,
                u.base_ms, u.max_ms, NULL, u.execution_id, u.node_id, 'pending', 0, ?2, ?2
         FROM unnest(?3::text[], ?4::text[], ?5::text[], ?6::bigint[], ?7::bigint[],
                     ?8::bigint[], ?9::bigint[], ?10::bigint[], ?11::text[], ?12::text[])
              WITH ORDINALITY AS u(id, queue, payload, priority, run_at_ms, max_attempts,
                                   base_ms, max_ms, execution_id, node_id, n)
         ORDER BY u.n",
        args![
            tenant,
            now_ms,
            Arg::Texts(&rows.ids),
            Arg::Texts(&rows.queues),
            Arg::Texts(&rows.payloads),
            Arg::Ints(&rows.priorities),
            Arg::Ints(&rows.run_ats),
            Arg::Ints(&rows.max_attempts),
            Arg::Ints(&rows.backoff_bases),
            Arg::Ints(&rows.backoff_maxes),
            Arg::Texts(&rows.execution_ids),
            Arg::Texts(&rows.node_ids)
        ],
    )?;
    Ok(())
}
