//! The queue's SQL: every statement, and the mapping of rows back to items.
//!
//! Every statement names the tenant. Every lease-holder write carries the fence and the
//! `claimed` status in its own `WHERE`, so it cannot apply to an item claimed again since.
//!
//! Every move of an item into or out of a finished status (completed, dead, cancelled), and
//! every deletion of finished items, writes `queue_counts` (`add_to_count`) in the same op:
//! the function that makes the rarer moves (dead letter, cancel, requeue, purge, prune) writes
//! it itself, so every caller keeps the counts; a completion, the job cycle's, is counted by
//! its op once per queue for the whole op (`complete` says so). `stats` reads those counts and
//! counts the live items from their partial indexes, so it costs O(queues + live items),
//! whatever the number of finished ones.

use std::collections::BTreeMap;

use crate::core::db::{Arg, Db, OwnedArg, Query, Row, args};
use crate::core::tx::Tx;

use super::{Backoff, ItemStatus, NewItem, QueueItem, QueueStats};
use crate::error::{Error, Result};

/// The columns `item_from_row` reads, in order.
macro_rules! item_columns {
    () => {
        "item_id, queue, payload, priority, run_at_ms, attempt, max_attempts, backoff_base_ms,
         backoff_max_ms, dedupe_key, execution_id, node_id, status, fence, worker_id,
         lease_expires_at_ms, last_error, result, created_at_ms, updated_at_ms, finished_at_ms,
         run_timeout_ms, tags, metadata"
    };
}
pub(super) use item_columns;

/// A statement reading items to claim or to sweep, and on PostgreSQL the rows it returns
/// locked, skipping those another connection holds: two processes never take the same item,
/// and neither waits for the other.
macro_rules! to_take {
    ($sql:expr) => {
        Query::per_engine($sql, concat!($sql, " FOR UPDATE SKIP LOCKED"))
    };
}

/// A statement over the pending items of a queue read through `queue_items_schedule` (due
/// time order, or the live counts): `$before`, the condition that picks them, `$after`. On
/// PostgreSQL the condition also asks `lease_expires_at_ms IS NULL` (true of every pending
/// item), which that index's predicate asks so that the claim, which does not, cannot take it
/// (schema_postgres.sql); SQLite's index has no such predicate, and the column is not in it.
macro_rules! pending_scheduled {
    ($before:expr, $after:expr) => {
        Query::per_engine(
            concat!($before, "status = 'pending'", $after),
            concat!($before, "status = 'pending' AND lease_expires_at_ms IS NULL", $after),
        )
    };
}

/// The condition a claim of an item of queue `?6` (tenant `?1`) adds to its own `WHERE`: the
/// queue is not paused, and fewer of its items are claimed than its limit allows. A queue
/// without a settings row (most) costs one primary-key probe; the count reads the partial
/// index of claimed items of that queue (at most its limit of them), only for a limited
/// queue. In the claiming statement, so that it holds for every process: on SQLite one writer
/// at a time; on PostgreSQL a writing batch holds its tenant's lock from its start to its
/// commit, so two processes' claims of a queue never both see room for the same slot.
macro_rules! gate_sql {
    () => {
        "NOT EXISTS (SELECT 1 FROM main.queue_settings
             WHERE tenant_id = ?1 AND queue = ?6
               AND (paused = 1 OR (concurrency_max IS NOT NULL AND concurrency_max <= (
                   SELECT count(*) FROM main.queue_items INDEXED BY queue_items_leases
                   WHERE tenant_id = ?1 AND queue = ?6 AND status = 'claimed'))))"
    };
}

/// An item as read, with its JSON still encoded.
#[derive(Debug, Clone)]
pub(super) struct ItemRow {
    pub(super) id: String,
    pub(super) queue: String,
    payload: String,
    pub(super) priority: i64,
    pub(super) run_at_ms: i64,
    pub(super) attempt: u32,
    pub(super) max_attempts: u32,
    pub(super) backoff: Backoff,
    pub(super) dedupe_key: Option<String>,
    execution_id: Option<String>,
    node_id: Option<String>,
    pub(super) status: ItemStatus,
    pub(super) fence: u64,
    pub(super) worker_id: Option<String>,
    pub(super) lease_expires_at_ms: Option<i64>,
    last_error: Option<String>,
    result: Option<String>,
    created_at_ms: i64,
    pub(super) updated_at_ms: i64,
    finished_at_ms: Option<i64>,
    run_timeout_ms: Option<i64>,
    tags: Option<String>,
    metadata: Option<String>,
}

impl ItemRow {
    /// The item with its JSON decoded.
    pub(super) fn into_item(self) -> Result<QueueItem> {
        let result = self.result.as_deref().map(serde_json::from_str).transpose()?;
        let tags = self.tags.as_deref().map(serde_json::from_str).transpose()?;
        let metadata = self.metadata.as_deref().map(serde_json::from_str).transpose()?;
        Ok(QueueItem {
            id: self.id,
            queue: self.queue,
            payload: serde_json::from_str(&self.payload)?,
            priority: self.priority,
            run_at_ms: self.run_at_ms,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            dedupe_key: self.dedupe_key,
            execution_id: self.execution_id,
            node_id: self.node_id,
            status: self.status,
            fence: self.fence,
            worker_id: self.worker_id,
            lease_expires_at_ms: self.lease_expires_at_ms,
            last_error: self.last_error,
            result,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            finished_at_ms: self.finished_at_ms,
            run_timeout_ms: self.run_timeout_ms,
            tags: tags.unwrap_or_default(),
            metadata,
        })
    }
}

/// The live item holding a dedupe key.
pub(super) struct LiveDuplicate {
    pub(super) id: String,
    pub(super) payload_hash: Option<String>,
}

/// The columns of a new item.
pub(super) struct NewRow<'r> {
    pub(super) id: &'r str,
    pub(super) item: &'r NewItem,
    pub(super) encoded: &'r str,
    /// The tags as a JSON array, and the metadata as JSON (`None`: none).
    pub(super) tags: Option<&'r str>,
    pub(super) metadata: Option<&'r str>,
    pub(super) hash: Option<&'r str>,
    pub(super) run_at_ms: i64,
}

pub(super) fn insert(db: Db<'_>, tenant: &str, now_ms: i64, row: &NewRow<'_>) -> Result<()> {
    let item = row.item;
    db.execute(
        "INSERT INTO main.queue_items (tenant_id, item_id, queue, payload, payload_hash, priority,
             run_at_ms, attempt, max_attempts, backoff_base_ms, backoff_max_ms, dedupe_key,
             execution_id, node_id, status, fence, created_at_ms, updated_at_ms, run_timeout_ms,
             tags, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11, ?12, ?13, 'pending', 0, ?14, ?14,
                 ?15, ?16, ?17)",
        args![
            tenant,
            row.id,
            item.queue,
            row.encoded,
            row.hash,
            item.priority,
            row.run_at_ms,
            item.max_attempts,
            item.backoff.base_ms,
            item.backoff.max_ms,
            item.dedupe_key,
            item.execution_id,
            item.node_id,
            now_ms,
            item.run_timeout_ms,
            row.tags,
            row.metadata
        ],
    )?;
    for tag in &item.tags {
        db.execute(
            "INSERT INTO main.queue_item_tags (tenant_id, queue, tag, item_id)
             VALUES (?1, ?2, ?3, ?4)",
            args![tenant, item.queue, tag, row.id],
        )?;
    }
    Ok(())
}

pub(super) fn select_item(db: Db<'_>, tenant: &str, id: &str) -> Result<Option<ItemRow>> {
    let row = db.query_opt(
        concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items WHERE tenant_id = ?1 AND item_id = ?2"
        ),
        args![tenant, id],
        item_from_row,
    )?;
    Ok(row)
}

pub(super) fn select_live_by_dedupe(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    key: &str,
) -> Result<Option<LiveDuplicate>> {
    let row = db.query_opt(
        "SELECT item_id, payload_hash FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ?2 AND dedupe_key = ?3
               AND status IN ('pending', 'claimed')",
        args![tenant, queue, key],
        |r| Ok(LiveDuplicate { id: r.get(0)?, payload_hash: r.get(1)? }),
    )?;
    Ok(row)
}

/// The item holding `key` in `queue`'s window starting at `window_start_ms`, if it is still
/// there.
pub(super) fn select_unique_holder(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    key: &str,
    window_start_ms: i64,
) -> Result<Option<ItemRow>> {
    db.query_opt(
        concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items WHERE tenant_id = ?1 AND item_id = (
                 SELECT item_id FROM main.queue_unique
                 WHERE tenant_id = ?1 AND queue = ?2 AND unique_key = ?3
                   AND window_start_ms = ?4)"
        ),
        args![tenant, queue, key, window_start_ms],
        item_from_row,
    )
}

/// Makes `item_id` the holder of `key` in `queue`'s window starting at `window_start_ms`.
pub(super) fn set_unique_holder(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    (key, window_start_ms): (&str, i64),
    item_id: &str,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_unique (tenant_id, queue, unique_key, window_start_ms, item_id)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (tenant_id, queue, unique_key, window_start_ms)
         DO UPDATE SET item_id = excluded.item_id",
        args![tenant, queue, key, window_start_ms, item_id],
    )?;
    Ok(())
}

/// Gives a pending item a new payload and run time; false when it is no longer pending.
pub(super) fn replace_pending(
    db: Db<'_>,
    tenant: &str,
    id: &str,
    (encoded, run_at_ms): (&str, i64),
    now_ms: i64,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.queue_items SET payload = ?3, run_at_ms = ?4, updated_at_ms = ?5
         WHERE tenant_id = ?1 AND item_id = ?2 AND status = 'pending'",
        args![tenant, id, encoded, run_at_ms, now_ms],
    )?;
    Ok(changed == 1)
}

/// Most priority levels one claim looks through before it falls back to one query over all of
/// them: a queue rarely uses more, and each level costs two index seeks.
const PRIORITY_LEVELS_MAX: usize = 64;

/// Up to `limit` due items of `queues`, in claim order (priority desc, run_at asc, id asc).
/// Each queue is read through its own index ranges, then the heads are merged.
pub(super) fn select_due(
    db: Db<'_>,
    tenant: &str,
    queues: &[String],
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    let mut due: Vec<ItemRow> = Vec::new();
    for queue in queues {
        due.extend(select_due_in(db, tenant, queue, now_ms, limit)?);
    }
    if queues.len() > 1 {
        due.sort_by(|a, b| {
            b.priority.cmp(&a.priority).then(a.run_at_ms.cmp(&b.run_at_ms)).then(a.id.cmp(&b.id))
        });
        due.dedup_by(|a, b| a.id == b.id);
    }
    due.truncate(limit);
    Ok(due)
}

/// The due items of one queue, a priority level at a time: within a level the index is ordered
/// by due time, so items scheduled for later are never read.
fn select_due_in(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    let mut due = Vec::new();
    let mut below = i64::MAX;
    for _ in 0..PRIORITY_LEVELS_MAX {
        let level: Option<i64> = db.query_value(
            "SELECT priority FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ?2 AND status = 'pending' AND priority < ?3
             ORDER BY priority DESC LIMIT 1",
            args![tenant, queue, below],
        )?;
        let Some(priority) = level else { return Ok(due) };
        let wanted = (limit - due.len()) as i64;
        due.extend(items(
            db,
            to_take!(concat!(
                "SELECT ",
                item_columns!(),
                " FROM main.queue_items
                  WHERE tenant_id = ?1 AND queue = ?2 AND status = 'pending' AND priority = ?3
                    AND run_at_ms <= ?4
                  ORDER BY run_at_ms, item_id LIMIT ?5"
            )),
            args![tenant, queue, priority, now_ms, wanted],
        )?);
        if due.len() >= limit {
            return Ok(due);
        }
        below = priority;
    }
    select_due_scanning(db, tenant, queue, now_ms, limit)
}

/// The due items of one queue in one query; reads past items not yet due, so it is only the
/// fallback for queues with very many priority levels.
fn select_due_scanning(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    items(
        db,
        to_take!(concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items
          WHERE tenant_id = ?1 AND queue = ?2 AND status = 'pending' AND run_at_ms <= ?3
          ORDER BY priority DESC, run_at_ms, item_id LIMIT ?4"
        )),
        args![tenant, queue, now_ms, limit as i64],
    )
}

/// Claims a pending item: one more attempt, the next fence, a lease. Returns it as claimed, or
/// `None` when its queue's settings refuse the claim (`gate_sql!`).
pub(super) fn claim(
    db: Db<'_>,
    tenant: &str,
    mut row: ItemRow,
    worker_id: &str,
    now_ms: i64,
    expires_at_ms: i64,
) -> Result<Option<ItemRow>> {
    let changed = db.execute(
        concat!(
            "UPDATE main.queue_items
         SET status = 'claimed', attempt = attempt + 1, fence = fence + 1, worker_id = ?3,
             lease_expires_at_ms = ?5, updated_at_ms = ?4
         WHERE tenant_id = ?1 AND item_id = ?2 AND status = 'pending' AND ",
            gate_sql!()
        ),
        args![tenant, row.id, worker_id, now_ms, expires_at_ms, row.queue],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    row.status = ItemStatus::Claimed;
    row.attempt += 1;
    row.fence += 1;
    row.worker_id = Some(worker_id.to_owned());
    row.lease_expires_at_ms = Some(expires_at_ms);
    row.updated_at_ms = now_ms;
    Ok(Some(row))
}

/// A held item: its tenant, id and the fence of the holder's claim.
pub(super) struct Held<'a> {
    pub(super) tenant: &'a str,
    pub(super) id: &'a str,
    pub(super) fence: u64,
}

/// Moves a live lease's expiry; false when `fence` no longer holds one.
pub(super) fn renew_lease(
    db: Db<'_>,
    held: &Held<'_>,
    now_ms: i64,
    expires_at_ms: i64,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.queue_items SET lease_expires_at_ms = ?5, updated_at_ms = ?4
             WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'
               AND lease_expires_at_ms > ?4",
        args![held.tenant, held.id, held.fence as i64, now_ms, expires_at_ms],
    )?;
    Ok(changed == 1)
}

/// Replaces a held item's payload; false when `fence` no longer holds a live lease.
pub(super) fn replace_payload(
    db: Db<'_>,
    held: &Held<'_>,
    now_ms: i64,
    payload: &str,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.queue_items SET payload = ?5, updated_at_ms = ?4
             WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'
               AND lease_expires_at_ms > ?4",
        args![held.tenant, held.id, held.fence as i64, now_ms, payload],
    )?;
    Ok(changed == 1)
}

/// Whether `queue` appends per-item events: true unless a setting turned them off.
pub(super) fn item_events(db: Db<'_>, tenant: &str, queue: &str) -> Result<bool> {
    let enabled: Option<bool> = db.query_opt(
        "SELECT item_events FROM main.queue_settings WHERE tenant_id = ?1 AND queue = ?2",
        args![tenant, queue],
        |r| r.get(0),
    )?;
    Ok(enabled.unwrap_or(true))
}

/// Records whether `queue` appends per-item events.
pub(super) fn set_item_events(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    enabled: bool,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_settings (tenant_id, queue, item_events, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant_id, queue)
         DO UPDATE SET item_events = excluded.item_events, updated_at_ms = excluded.updated_at_ms",
        args![tenant, queue, enabled, now_ms],
    )?;
    Ok(())
}

/// What an item event names: the queue and the attempt.
pub(super) struct EventFields {
    pub(super) queue: String,
    pub(super) attempt: u32,
}

/// The statement that completes a held item.
macro_rules! complete_sql {
    () => {
        "UPDATE main.queue_items
             SET status = 'completed', result = ?5, worker_id = NULL, lease_expires_at_ms = NULL,
                 updated_at_ms = ?4, finished_at_ms = ?4
             WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'
               AND lease_expires_at_ms > ?4"
    };
}

/// Completes a held item; `None` when `fence` no longer holds a live lease. Its count is the
/// caller's to add (`add_to_count`): an op counts its completions of a queue at once. On
/// PostgreSQL the update returns what the event names (one round trip); on SQLite it is read
/// after, as the store's hot writes avoid `RETURNING` (SQLite codes it as a trigger).
pub(super) fn complete(
    db: Db<'_>,
    tenant: &str,
    id: &str,
    fence: u64,
    now_ms: i64,
    result: &str,
) -> Result<Option<EventFields>> {
    let fence = fence as i64;
    let args = args![tenant, id, fence, now_ms, result];
    let fields = |r: &Row<'_>| Ok(EventFields { queue: r.get(0)?, attempt: r.get(1)? });
    if db.is_postgres() {
        return db.query_opt(concat!(complete_sql!(), " RETURNING queue, attempt"), args, fields);
    }
    if db.execute(complete_sql!(), args)? != 1 {
        return Ok(None);
    }
    let fields = db.query_one(
        "SELECT queue, attempt FROM main.queue_items WHERE tenant_id = ?1 AND item_id = ?2",
        args![tenant, id],
        fields,
    )?;
    Ok(Some(fields))
}

/// Returns a held item to pending with its attempt refunded.
pub(super) fn release(db: Db<'_>, tenant: &str, id: &str, fence: u64, now_ms: i64) -> Result<()> {
    db.execute(
        "UPDATE main.queue_items
         SET status = 'pending', attempt = attempt - 1, worker_id = NULL,
             lease_expires_at_ms = NULL, updated_at_ms = ?4
         WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'",
        args![tenant, id, fence as i64, now_ms],
    )
    .map(|changed| Error::expect_one(changed, "item", id))?
}

/// Up to `limit` claimed items of `queue` whose lease has expired, oldest expiry first.
pub(super) fn select_expired_in(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    items(
        db,
        to_take!(concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items
          WHERE tenant_id = ?1 AND queue = ?2 AND status = 'claimed' AND lease_expires_at_ms <= ?3
          ORDER BY lease_expires_at_ms, item_id LIMIT ?4"
        )),
        args![tenant, queue, now_ms, limit as i64],
    )
}

/// Up to `limit` claimed items of any queue whose lease has expired. Reads the tenant's claimed
/// items, which are few: one per lease a worker holds.
pub(super) fn select_expired(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    items(
        db,
        to_take!(concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items INDEXED BY queue_items_leases
          WHERE tenant_id = ?1 AND status = 'claimed' AND lease_expires_at_ms <= ?2
          ORDER BY lease_expires_at_ms, item_id LIMIT ?3"
        )),
        args![tenant, now_ms, limit as i64],
    )
}

/// Ends a claimed attempt with a retry due at `run_at_ms`.
pub(super) fn schedule_retry(
    db: Db<'_>,
    tenant: &str,
    id: &str,
    fence: u64,
    now_ms: i64,
    run_at_ms: i64,
    error: &str,
) -> Result<()> {
    db.execute(
        "UPDATE main.queue_items
         SET status = 'pending', run_at_ms = ?5, last_error = ?6, worker_id = NULL,
             lease_expires_at_ms = NULL, updated_at_ms = ?4
         WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'",
        args![tenant, id, fence as i64, now_ms, run_at_ms, error],
    )
    .map(|changed| Error::expect_one(changed, "item", id))?
}

/// Ends a claimed attempt of `item` (its id and fence) in the dead-letter state; the caller
/// counts it (`add_to_count_late`).
pub(super) fn dead_letter(
    db: Db<'_>,
    tenant: &str,
    item: &ItemRow,
    now_ms: i64,
    error: &str,
) -> Result<()> {
    let id = &item.id;
    db.execute(
        "UPDATE main.queue_items
         SET status = 'dead', last_error = ?5, worker_id = NULL, lease_expires_at_ms = NULL,
             updated_at_ms = ?4, finished_at_ms = ?4
         WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'",
        args![tenant, id, item.fence as i64, now_ms, error],
    )
    .map(|changed| Error::expect_one(changed, "item", id))?
}

/// Which items [`select_items`] reads (an `ItemFilter` checked and encoded).
pub(super) struct Which<'f> {
    /// The items' status.
    pub(super) status: ItemStatus,
    /// Given `(due, now_ms)`, pending items due by then (`true`) or later.
    pub(super) due_by_ms: Option<(bool, i64)>,
    /// Only the items with this tag.
    pub(super) tag: Option<&'f str>,
    /// Only the items whose metadata has each key with the value (as JSON text).
    pub(super) metadata: &'f [(&'f str, String)],
}

impl Which<'_> {
    /// Every item with `status`.
    pub(super) fn status(status: ItemStatus) -> Self {
        Which { status, due_by_ms: None, tag: None, metadata: &[] }
    }
}

/// Most items of a listing a metadata filter reads for one page.
pub(super) const METADATA_SCAN_MAX: usize = 10_000;

/// Up to `limit` items of `queue` that `which` takes, with ids after `after`, in id (enqueue)
/// order.
pub(super) fn select_items(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    which: Which<'_>,
    (after, limit): (&str, usize),
) -> Result<Vec<ItemRow>> {
    let Which { status, due_by_ms, tag, metadata } = which;
    // The status is written into the statement (one of five literals), so that SQLite uses
    // the partial index of that status; finished items have theirs in id order, so that a
    // page of them is a key range however many items the store holds. SQLite uses a partial
    // index only where the query repeats its WHERE term, hence the `IN` beside the `=`.
    let (index, done) = match status {
        ItemStatus::Dead => ("INDEXED BY queue_items_dead", ""),
        ItemStatus::Completed | ItemStatus::Cancelled => {
            ("INDEXED BY queue_items_done_by_queue", "AND status IN ('completed', 'cancelled')")
        }
        ItemStatus::Pending | ItemStatus::Claimed => ("", ""),
    };
    let due = match due_by_ms {
        Some((true, _)) => "AND run_at_ms <= ?5",
        Some((false, _)) => "AND run_at_ms > ?5",
        None => "AND CAST(?5 AS BIGINT) IS NOT NULL", // every item (the parameter is bound either way)
    };
    let (now_ms, limit_sql) = (due_by_ms.map_or(0, |(_, now_ms)| now_ms), limit as i64);
    let mut all = args![tenant, queue, after, limit_sql, now_ms].to_vec();
    all.extend(tag.map(Arg::Text));
    let scan = all.len() + 1;
    // One more than the bound: reading past it tells that the listing goes on.
    all.push(Arg::Int(METADATA_SCAN_MAX as i64 + 1));
    let listing = |limit: &str| {
        if tag.is_some() {
            // The tag's rows drive (a key range of its primary key, in id order); each is
            // looked up by its item's key and kept if it has the status.
            format!(
                "SELECT {} FROM main.queue_items
                 WHERE tenant_id = ?1 AND item_id IN (
                     SELECT item_id FROM main.queue_item_tags
                     WHERE tenant_id = ?1 AND queue = ?2 AND tag = ?6 AND item_id > ?3)
                   AND status = '{}' {due}
                 ORDER BY item_id LIMIT {limit}",
                item_columns!(),
                status.as_str()
            )
        } else {
            format!(
                "SELECT {} FROM main.queue_items {index}
                 WHERE tenant_id = ?1 AND queue = ?2 AND status = '{}' {done} AND item_id > ?3
                   {due}
                 ORDER BY item_id LIMIT {limit}",
                item_columns!(),
                status.as_str()
            )
        }
    };
    if metadata.is_empty() {
        let sql = listing("?4");
        return items(db, Query::from(&sql), &all[..scan - 1]);
    }
    // Metadata has no index: the conditions are kept over at most METADATA_SCAN_MAX items of
    // the listing (in id order from the page's key), so that a filter matching little costs
    // a bounded read; a page it cannot fill within them is refused, not cut short.
    let scanned = listing(&format!("?{scan}"));
    let (sqlite_meta, postgres_meta) = metadata_conditions(scan + 1, metadata.len());
    for (key, value) in metadata {
        all.extend([Arg::Text(key), Arg::Text(value)]);
    }
    let kept = |meta: &str| {
        format!(
            "SELECT {} FROM ({scanned}) AS scanned WHERE 1 = 1 {meta} ORDER BY item_id LIMIT ?4",
            item_columns!()
        )
    };
    let (sqlite, postgres) = (kept(&sqlite_meta), kept(&postgres_meta));
    let rows = items(db, Query::per_engine(&sqlite, &postgres), &all)?;
    if rows.len() < limit {
        // The page's size is bound either way (PostgreSQL types every parameter it is given).
        let count = format!(
            "SELECT count(*) FROM ({scanned}) AS scanned WHERE CAST(?4 AS BIGINT) IS NOT NULL"
        );
        let read: i64 = db.query_one(&count, &all[..scan], |r| r.get(0))?;
        if read > METADATA_SCAN_MAX as i64 {
            return Err(Error::too_large(
                "items a metadata filter reads for a page (narrow it with a tag)",
                METADATA_SCAN_MAX,
                METADATA_SCAN_MAX + 1,
            ));
        }
    }
    Ok(rows)
}

/// The `WHERE` terms of `count` metadata conditions whose key and value (JSON text) are the
/// parameters from `?first` on, two each: SQLite's and PostgreSQL's. Each keeps an item whose
/// metadata has the key with an equal value of the same JSON type (numbers equal as numbers,
/// `1` and `1.0` alike). SQLite reads the top-level members with `json_each` (a key is
/// compared as text, never parsed as a path) and compares their type (`integer` and `real`
/// as one) and SQL value (`atom`: NULL for null, 1 and 0 for booleans, told apart from
/// numbers by the type); PostgreSQL compares the member as `jsonb`, which is typed and
/// compares numbers by value.
fn metadata_conditions(first: usize, count: usize) -> (String, String) {
    let (mut sqlite, mut postgres) = (String::new(), String::new());
    for n in 0..count {
        let (key, value) = (first + 2 * n, first + 2 * n + 1);
        sqlite.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM json_each(metadata) AS m
                 WHERE m.key = ?{key} AND m.atom IS json_extract(?{value}, '$')
                   AND replace(m.type, 'real', 'integer')
                       = replace(json_type(?{value}), 'real', 'integer'))"
        ));
        postgres.push_str(&format!(
            " AND (CAST(metadata AS jsonb) -> CAST(?{key} AS text)) = CAST(?{value} AS jsonb)"
        ));
    }
    (sqlite, postgres)
}

/// Makes a dead item pending again with fresh attempts, due now.
pub(super) fn requeue(db: Db<'_>, tenant: &str, item: &ItemRow, now_ms: i64) -> Result<()> {
    let id = &item.id;
    db.execute(
        "UPDATE main.queue_items
         SET status = 'pending', attempt = 0, run_at_ms = ?3, updated_at_ms = ?3,
             finished_at_ms = NULL
         WHERE tenant_id = ?1 AND item_id = ?2 AND status = 'dead'",
        args![tenant, id, now_ms],
    )
    .map(|changed| Error::expect_one(changed, "item", id))??;
    add_to_count(db, tenant, &item.queue, ItemStatus::Dead, -1)
}

/// Deletes up to `limit` dead items of `queue`; returns how many.
pub(super) fn delete_dead(db: Db<'_>, tenant: &str, queue: &str, limit: usize) -> Result<u64> {
    // Their tags and unique keys first, by the same selection (the same rows, in this
    // transaction).
    db.execute(
        "DELETE FROM main.queue_item_tags
             WHERE tenant_id = ?1 AND queue = ?2 AND item_id IN (
                 SELECT item_id FROM main.queue_items INDEXED BY queue_items_dead
                 WHERE tenant_id = ?1 AND queue = ?2 AND status = 'dead'
                 ORDER BY item_id LIMIT ?3)",
        args![tenant, queue, limit as i64],
    )?;
    db.execute(
        "DELETE FROM main.queue_unique
             WHERE tenant_id = ?1 AND item_id IN (
                 SELECT item_id FROM main.queue_items INDEXED BY queue_items_dead
                 WHERE tenant_id = ?1 AND queue = ?2 AND status = 'dead'
                 ORDER BY item_id LIMIT ?3)",
        args![tenant, queue, limit as i64],
    )?;
    let deleted = db.execute(
        "DELETE FROM main.queue_items
             WHERE tenant_id = ?1 AND item_id IN (
                 SELECT item_id FROM main.queue_items INDEXED BY queue_items_dead
                 WHERE tenant_id = ?1 AND queue = ?2 AND status = 'dead'
                 ORDER BY item_id LIMIT ?3)",
        args![tenant, queue, limit as i64],
    )?;
    add_to_count(db, tenant, queue, ItemStatus::Dead, -(deleted as i64))?;
    Ok(deleted as u64)
}

/// Cancels a live item.
pub(super) fn cancel(db: Db<'_>, tenant: &str, item: &ItemRow, now_ms: i64) -> Result<()> {
    let id = &item.id;
    db.execute(
        "UPDATE main.queue_items
         SET status = 'cancelled', worker_id = NULL, lease_expires_at_ms = NULL,
             updated_at_ms = ?3, finished_at_ms = ?3
         WHERE tenant_id = ?1 AND item_id = ?2 AND status IN ('pending', 'claimed')",
        args![tenant, id, now_ms],
    )
    .map(|changed| Error::expect_one(changed, "item", id))??;
    add_to_count(db, tenant, &item.queue, ItemStatus::Cancelled, 1)
}

/// Up to `limit` live items of a workflow execution.
pub(super) fn select_live_of_execution(
    db: Db<'_>,
    tenant: &str,
    execution_id: &str,
    limit: usize,
) -> Result<Vec<ItemRow>> {
    items(
        db,
        concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items INDEXED BY queue_items_execution
          WHERE tenant_id = ?1 AND execution_id = ?2 AND status IN ('pending', 'claimed')
          ORDER BY item_id LIMIT ?3"
        ),
        args![tenant, execution_id, limit as i64],
    )
}

/// The counts of every queue of the tenant with an item, by name: the finished ones from
/// `queue_counts`, the live ones (due, scheduled, claimed, and the oldest due) from the partial
/// indexes of pending and claimed items. One statement; it reads no finished item.
pub(super) fn select_stats(db: Db<'_>, tenant: &str, now_ms: i64) -> Result<Vec<QueueStats>> {
    let rows = db.query_all(
        pending_scheduled!(
            "SELECT queue, status, total, 0, CAST(NULL AS BIGINT) FROM main.queue_counts
         WHERE tenant_id = ?1
         UNION ALL
         SELECT queue, 'pending', SUM(CASE WHEN run_at_ms <= ?2 THEN 1 ELSE 0 END),
                SUM(CASE WHEN run_at_ms > ?2 THEN 1 ELSE 0 END),
                MIN(CASE WHEN run_at_ms <= ?2 THEN run_at_ms END)
         FROM main.queue_items INDEXED BY queue_items_schedule
         WHERE tenant_id = ?1 AND ",
            " GROUP BY queue
         UNION ALL
         SELECT queue, 'claimed', count(*), 0, CAST(NULL AS BIGINT)
         FROM main.queue_items INDEXED BY queue_items_leases
         WHERE tenant_id = ?1 AND status = 'claimed' GROUP BY queue"
        ),
        args![tenant, now_ms],
        |r| {
            let count = |index: usize| -> Result<u64> { Ok(r.get::<i64>(index)?.max(0) as u64) };
            let status: String = r.get(1)?;
            let oldest: Option<i64> = r.get(4)?;
            Ok((r.get::<String>(0)?, status, [count(2)?, count(3)?], oldest))
        },
    )?;
    let mut queues: BTreeMap<String, QueueStats> = BTreeMap::new();
    for (queue, status, [first, second], oldest) in rows {
        let stats = queues.entry(queue.clone()).or_insert_with(|| QueueStats::empty(queue));
        match status.as_str() {
            "pending" => {
                (stats.pending, stats.scheduled) = (first, second);
                stats.oldest_pending_age_ms = oldest.map(|at| now_ms.saturating_sub(at));
            }
            "claimed" => stats.claimed = first,
            "completed" => stats.completed = first,
            "dead" => stats.dead = first,
            // Cancelled items are not reported, but they make their queue one with items.
            _ => {}
        }
    }
    Ok(queues.into_values().collect())
}

/// The tenant's kept counts (`queue_counts`) and a recount of its finished items, each as
/// `("queue QUEUE STATUS", total)`.
pub(super) fn select_counts_and_recount(
    db: Db<'_>,
    tenant: &str,
) -> Result<[Vec<(String, u64)>; 2]> {
    let row = |r: &Row<'_>| -> Result<(String, u64)> {
        let (queue, status): (String, String) = (r.get(0)?, r.get(1)?);
        Ok((format!("queue {queue} {status}"), r.get::<i64>(2)?.max(0) as u64))
    };
    let kept = db.query_all(
        "SELECT queue, status, total FROM main.queue_counts WHERE tenant_id = ?1",
        args![tenant],
        row,
    )?;
    let counted = db.query_all(
        "SELECT queue, status, count(*) FROM main.queue_items
         WHERE tenant_id = ?1 AND (status = 'completed' OR status = 'dead' OR status = 'cancelled')
         GROUP BY queue, status",
        args![tenant],
        row,
    )?;
    Ok([kept, counted])
}

/// Deletes up to `limit` completed or cancelled items finished before `cutoff_ms`, oldest
/// first; returns how many.
pub(super) fn delete_finished_before(
    db: Db<'_>,
    tenant: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<u64> {
    // Their tags and unique keys first, by the same selection (the same rows, in this
    // transaction).
    for table in [
        "DELETE FROM main.queue_item_tags WHERE tenant_id = ?1 AND item_id IN (",
        "DELETE FROM main.queue_unique WHERE tenant_id = ?1 AND item_id IN (",
    ] {
        let sql = format!(
            "{table}
                 SELECT item_id FROM main.queue_items INDEXED BY queue_items_finished
                 WHERE tenant_id = ?1 AND status IN ('completed', 'cancelled')
                   AND finished_at_ms < ?2
                 ORDER BY finished_at_ms, item_id LIMIT ?3)"
        );
        db.execute(&sql, args![tenant, cutoff_ms, limit as i64])?;
    }
    let deleted: Vec<(String, String)> = db.query_all(
        "DELETE FROM main.queue_items
             WHERE tenant_id = ?1 AND item_id IN (
                 SELECT item_id FROM main.queue_items INDEXED BY queue_items_finished
                 WHERE tenant_id = ?1 AND status IN ('completed', 'cancelled')
                   AND finished_at_ms < ?2
                 ORDER BY finished_at_ms, item_id LIMIT ?3)
             RETURNING queue, status",
        args![tenant, cutoff_ms, limit as i64],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut by_count: BTreeMap<(String, String), i64> = BTreeMap::new();
    for key in &deleted {
        *by_count.entry(key.clone()).or_default() += 1;
    }
    for ((queue, status), total) in by_count {
        add_to_count(db, tenant, &queue, ItemStatus::parse(&status)?, -total)?;
    }
    Ok(deleted.len() as u64)
}

/// Adds `?4` (positive) to the count of queue `?2`'s items in status `?3` (tenant `?1`).
const ADD_TO_COUNT_SQL: &str =
    "INSERT INTO main.queue_counts AS c (tenant_id, queue, status, total)
     VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (tenant_id, queue, status) DO UPDATE SET total = c.total + excluded.total";

/// Adds `added` (positive) to the count of `queue`'s items in `status` (a finished one): now,
/// or in a call that shares its tenant's turn on PostgreSQL at its batch's end
/// (`Tx::write_late`), so that such batches hold the count's row only while they commit.
pub(super) fn add_to_count_late(
    tx: &mut Tx<'_>,
    queue: &str,
    status: ItemStatus,
    added: i64,
) -> Result<()> {
    if !tx.writes_late() {
        return add_to_count(tx.db(), tx.tenant(), queue, status, added);
    }
    let status = status.as_str();
    // Lengths first: names may hold any character, and two rows must never share a key.
    let tenant = tx.tenant();
    let key = format!("queue_counts {} {} {tenant} {queue} {status}", tenant.len(), queue.len());
    let args = vec![
        OwnedArg::Text(tx.tenant().to_owned()),
        OwnedArg::Text(queue.to_owned()),
        OwnedArg::Text(status.to_owned()),
        OwnedArg::Int(added),
    ];
    tx.write_late(key, ADD_TO_COUNT_SQL, args);
    Ok(())
}

/// Adds `delta` (negative: takes it away) to the count of `queue`'s items in `status` (a
/// finished one: completed, dead, cancelled), in the op that moves the items: a count that
/// reaches 0 goes (see the last section of `schema.sql`).
pub(super) fn add_to_count(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    status: ItemStatus,
    delta: i64,
) -> Result<()> {
    let status = status.as_str();
    if delta > 0 {
        db.execute(ADD_TO_COUNT_SQL, args![tenant, queue, status, delta])?;
    } else if delta < 0 {
        db.execute(
            "DELETE FROM main.queue_counts
             WHERE tenant_id = ?1 AND queue = ?2 AND status = ?3 AND total <= ?4",
            args![tenant, queue, status, -delta],
        )?;
        db.execute(
            "UPDATE main.queue_counts SET total = total - ?4
             WHERE tenant_id = ?1 AND queue = ?2 AND status = ?3",
            args![tenant, queue, status, -delta],
        )?;
    }
    Ok(())
}

/// The next moment something in `queue` may become claimable: the earliest due time of its
/// pending items, or the earliest expiry of its leases (an expired lease is retried).
pub(super) fn select_next_due(db: Db<'_>, tenant: &str, queue: &str) -> Result<Option<i64>> {
    let due: Option<i64> = db.query_opt(
        pending_scheduled!(
            "SELECT run_at_ms FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ?2 AND ",
            " ORDER BY run_at_ms LIMIT 1"
        ),
        args![tenant, queue],
        |r| r.get(0),
    )?;
    let expiry: Option<i64> = db.query_opt(
        "SELECT lease_expires_at_ms FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ?2 AND status = 'claimed'
             ORDER BY lease_expires_at_ms LIMIT 1",
        args![tenant, queue],
        |r| r.get(0),
    )?;
    Ok(match (due, expiry) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// Every row a statement over `item_columns!()` returns.
fn items<'q>(db: Db<'_>, sql: impl Into<Query<'q>>, args: &[Arg<'_>]) -> Result<Vec<ItemRow>> {
    db.query_all(sql, args, item_from_row)
}

pub(super) fn item_from_row(row: &Row<'_>) -> Result<ItemRow> {
    let status: String = row.get(12)?;
    let status = ItemStatus::parse(&status)?;
    Ok(ItemRow {
        id: row.get(0)?,
        queue: row.get(1)?,
        payload: row.get(2)?,
        priority: row.get(3)?,
        run_at_ms: row.get(4)?,
        attempt: row.get(5)?,
        max_attempts: row.get(6)?,
        backoff: Backoff { base_ms: row.get(7)?, max_ms: row.get(8)? },
        dedupe_key: row.get(9)?,
        execution_id: row.get(10)?,
        node_id: row.get(11)?,
        status,
        fence: row.get::<i64>(13)?.max(0) as u64,
        worker_id: row.get(14)?,
        lease_expires_at_ms: row.get(15)?,
        last_error: row.get(16)?,
        result: row.get(17)?,
        created_at_ms: row.get(18)?,
        updated_at_ms: row.get(19)?,
        finished_at_ms: row.get(20)?,
        run_timeout_ms: row.get(21)?,
        tags: row.get(22)?,
        metadata: row.get(23)?,
    })
}

/// A queue's settings as stored (`queue_settings`); a queue without a row has the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) queue: String,
    pub(super) item_events: bool,
    pub(super) paused: bool,
    pub(super) concurrency_max: Option<u32>,
}

/// The settings of `queue`, if it has a row.
pub(super) fn select_settings(db: Db<'_>, tenant: &str, queue: &str) -> Result<Option<Settings>> {
    db.query_opt(
        "SELECT queue, item_events, paused, concurrency_max FROM main.queue_settings
         WHERE tenant_id = ?1 AND queue = ?2",
        args![tenant, queue],
        settings_from_row,
    )
}

/// The settings of the tenant's queues that are paused or limited, by name.
pub(super) fn select_controlled(db: Db<'_>, tenant: &str) -> Result<Vec<Settings>> {
    db.query_all(
        "SELECT queue, item_events, paused, concurrency_max FROM main.queue_settings
         WHERE tenant_id = ?1 AND (paused = 1 OR concurrency_max IS NOT NULL) ORDER BY queue",
        args![tenant],
        settings_from_row,
    )
}

fn settings_from_row(r: &Row<'_>) -> Result<Settings> {
    let concurrency_max: Option<i64> = r.get(3)?;
    Ok(Settings {
        queue: r.get(0)?,
        item_events: r.get(1)?,
        paused: r.get(2)?,
        concurrency_max: concurrency_max.map(|max| u32::try_from(max).unwrap_or(u32::MAX)),
    })
}

/// Records whether `queue` is paused (a new row keeps the other defaults).
pub(super) fn set_paused(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    paused: bool,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_settings (tenant_id, queue, item_events, updated_at_ms, paused)
         VALUES (?1, ?2, 1, ?4, ?3)
         ON CONFLICT (tenant_id, queue)
         DO UPDATE SET paused = excluded.paused, updated_at_ms = excluded.updated_at_ms",
        args![tenant, queue, paused, now_ms],
    )?;
    Ok(())
}

/// Records `queue`'s concurrency limit (`None`: no limit; a new row keeps the other defaults).
pub(super) fn set_concurrency(
    db: Db<'_>,
    tenant: &str,
    queue: &str,
    concurrency_max: Option<u32>,
    now_ms: i64,
) -> Result<()> {
    let max = concurrency_max.map(i64::from);
    db.execute(
        "INSERT INTO main.queue_settings
             (tenant_id, queue, item_events, updated_at_ms, concurrency_max)
         VALUES (?1, ?2, 1, ?4, ?3)
         ON CONFLICT (tenant_id, queue) DO UPDATE
         SET concurrency_max = excluded.concurrency_max, updated_at_ms = excluded.updated_at_ms",
        args![tenant, queue, max, now_ms],
    )?;
    Ok(())
}

/// How many items of `queue` are claimed (from the partial index of claimed items).
pub(super) fn count_claimed(db: Db<'_>, tenant: &str, queue: &str) -> Result<u64> {
    let claimed: Option<i64> = db.query_value(
        "SELECT count(*) FROM main.queue_items INDEXED BY queue_items_leases
         WHERE tenant_id = ?1 AND queue = ?2 AND status = 'claimed'",
        args![tenant, queue],
    )?;
    Ok(claimed.unwrap_or(0).max(0) as u64)
}

/// The earliest expiry of `queue`'s leases: when a full queue may have room again at the
/// latest (a settlement before it rings the bell).
pub(super) fn select_next_expiry(db: Db<'_>, tenant: &str, queue: &str) -> Result<Option<i64>> {
    db.query_value(
        "SELECT lease_expires_at_ms FROM main.queue_items INDEXED BY queue_items_leases
         WHERE tenant_id = ?1 AND queue = ?2 AND status = 'claimed'
         ORDER BY lease_expires_at_ms LIMIT 1",
        args![tenant, queue],
    )
}

/// Puts a held item back to pending, due at `run_at_ms`, with its attempt refunded (a
/// snooze); false when `fence` no longer holds a live lease.
pub(super) fn snooze(db: Db<'_>, held: &Held<'_>, now_ms: i64, run_at_ms: i64) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.queue_items
         SET status = 'pending', attempt = attempt - 1, run_at_ms = ?5, worker_id = NULL,
             lease_expires_at_ms = NULL, updated_at_ms = ?4
         WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'
           AND lease_expires_at_ms > ?4",
        args![held.tenant, held.id, held.fence as i64, now_ms, run_at_ms],
    )?;
    Ok(changed == 1)
}
