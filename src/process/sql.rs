//! The process registry's SQL: every statement, and the mapping of rows back to records,
//! grants and leases.
//!
//! Every statement names the tenant. Lease-holder writes carry the token and the fencing token
//! in their own `WHERE`, so a stale holder's write matches no row. The functions that insert a
//! process, save a change of its state or delete it also write its count in `process_counts`
//! (`add_to_count`), in the same op.

use crate::core::db::{Db, Query, Row, args};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{
    EventSemantics, HandleDescriptor, HandleGrant, LeaseOwner, ListFilter, ProcessCounts,
    ProcessLease, ProcessRecord, ProcessStatus, Registration, StatusFilter,
};
use crate::error::{Error, Result};
use crate::hash::content_hash;
use crate::page::{from_sql_int, sql_limit, to_sql_int};

/// The columns `record_from_row` reads, in order.
macro_rules! record_columns {
    () => {
        "registration_hash, registration, status, await_output, external_ref, wait_state,
         wake_target, created_at_ms, updated_at_ms"
    };
}

/// A listing's statement, with the status condition `$status` on parameter 2.
macro_rules! list_sql {
    ($status:literal) => {
        concat!(
            "SELECT process_id, ",
            record_columns!(),
            " FROM main.processes
              WHERE tenant_id = ?1 AND ",
            $status,
            " AND (CAST(?3 AS TEXT) IS NULL OR definition_hash = ?3)
                AND (CAST(?4 AS BOOLEAN) IS NULL OR (wait_state IS NOT NULL) = CAST(?4 AS BOOLEAN))
                AND process_id > ?5
              ORDER BY process_id LIMIT ?6"
        )
    };
}

/// Inserts a new running process.
pub(super) fn insert(
    db: Db<'_>,
    tenant: &str,
    record: &ProcessRecord,
    encoded_registration: &str,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.processes (tenant_id, process_id, registration_hash, registration,
                                definition_hash, status, wake_target, wake_target_session,
                                created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?8)",
        args![
            tenant,
            record.id,
            record.registration_hash,
            encoded_registration,
            record.identity.definition.as_ref().map(content_hash),
            encode_opt(&record.wake_target)?,
            record.wake_target.as_ref().map(|scope| scope.session_id.as_str()),
            record.created_at_ms,
        ],
    )?;
    add_to_count(db, tenant, count_state(record), 1)
}

/// A process's state as `process_counts` counts it: its status, or `waiting` for a running
/// process with a wait state.
pub(super) fn count_state(record: &ProcessRecord) -> &'static str {
    match (&record.status, &record.wait) {
        (ProcessStatus::Running, Some(_)) => "waiting",
        (status, _) => status.label(),
    }
}

/// Writes what changes after registration: status and output, external ref, wait, wake
/// target and the update time. `before` is the state (`count_state`) the process was in as
/// stored: its count moves with it.
pub(super) fn save(
    db: Db<'_>,
    tenant: &str,
    record: &ProcessRecord,
    before: &'static str,
) -> Result<()> {
    let changed = db.execute(
        "UPDATE main.processes
             SET status = ?3, await_output = ?4, external_ref = ?5, wait_state = ?6,
                 wake_target = ?7, wake_target_session = ?8, updated_at_ms = ?9
             WHERE tenant_id = ?1 AND process_id = ?2",
        args![
            tenant,
            record.id,
            record.status.label(),
            encode_opt(&record.status.await_output())?,
            encode_opt(&record.external_ref)?,
            encode_opt(&record.wait)?,
            encode_opt(&record.wake_target)?,
            record.wake_target.as_ref().map(|scope| scope.session_id.as_str()),
            record.updated_at_ms,
        ],
    )?;
    Error::expect_one(changed, "process", &record.id)?;
    let after = count_state(record);
    if after != before {
        add_to_count(db, tenant, before, -1)?;
        add_to_count(db, tenant, after, 1)?;
    }
    Ok(())
}

/// A process's registration hash, if it exists (a cheap existence check).
pub(super) fn select_hash(db: Db<'_>, tenant: &str, id: &str) -> Result<Option<String>> {
    let hash = db.query_opt(
        "SELECT registration_hash FROM main.processes WHERE tenant_id = ?1 AND process_id = ?2",
        args![tenant, id],
        |row| row.get(0),
    )?;
    Ok(hash)
}

/// One process, if it exists.
pub(super) fn select(db: Db<'_>, tenant: &str, id: &str) -> Result<Option<ProcessRecord>> {
    db.query_opt(
        concat!(
            "SELECT process_id, ",
            record_columns!(),
            " FROM main.processes WHERE tenant_id = ?1 AND process_id = ?2"
        ),
        args![tenant, id],
        record_from_row,
    )
}

/// How many of the tenant's processes are in each state, from `process_counts`: at most five
/// rows.
pub(super) fn count(db: Db<'_>, tenant: &str) -> Result<ProcessCounts> {
    let rows: Vec<(String, i64)> = db.query_all(
        "SELECT state, total FROM main.process_counts WHERE tenant_id = ?1",
        args![tenant],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let mut counts = ProcessCounts::default();
    for (state, total) in rows {
        let slot = match state.as_str() {
            "running" => &mut counts.running,
            "waiting" => &mut counts.waiting,
            "completed" => &mut counts.completed,
            "failed" => &mut counts.failed,
            "cancelled" => &mut counts.cancelled,
            other => return Err(Error::Corrupt(format!("unknown process state {other:?}"))),
        };
        *slot += from_sql_int(total);
    }
    Ok(counts)
}

/// The tenant's kept process counts (`process_counts`) and a recount of its processes, each
/// as `("processes STATE", total)`.
pub(super) fn select_counts_and_recount(
    db: Db<'_>,
    tenant: &str,
) -> Result<[Vec<(String, u64)>; 2]> {
    let row = |r: &Row<'_>| -> Result<(String, u64)> {
        Ok((format!("processes {}", r.get::<String>(0)?), from_sql_int(r.get(1)?)))
    };
    let kept = db.query_all(
        "SELECT state, total FROM main.process_counts WHERE tenant_id = ?1",
        args![tenant],
        row,
    )?;
    let counted = db.query_all(
        "SELECT CASE WHEN wait_state IS NULL THEN status ELSE 'waiting' END, count(*)
         FROM main.processes WHERE tenant_id = ?1 GROUP BY 1",
        args![tenant],
        row,
    )?;
    Ok([kept, counted])
}

/// A page of processes matching `filter`, in id order.
pub(super) fn list(db: Db<'_>, tenant: &str, filter: &ListFilter) -> Result<Vec<ProcessRecord>> {
    // Two statements, so that a listing by status reads the status index in id order.
    let sql = match filter.status {
        StatusFilter::Any => list_sql!("CAST(?2 AS TEXT) IS NULL"),
        _ => list_sql!("status = ?2"),
    };
    let status = match filter.status {
        StatusFilter::Any => None,
        StatusFilter::Running => Some("running"),
        StatusFilter::Completed => Some("completed"),
        StatusFilter::Failed => Some("failed"),
        StatusFilter::Cancelled => Some("cancelled"),
    };
    let definition = filter.definition.as_ref().map(content_hash);
    let after = filter.page.after.as_deref().unwrap_or("");
    let limit = sql_limit(filter.page.limit);
    let args = args![tenant, status, definition, filter.waiting, after, limit];
    db.query_all(sql, args, record_from_row)
}

/// Records what an event meant (`encoded`: its JSON).
pub(super) fn insert_semantics(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
    seq: u64,
    encoded: &str,
    has_wake: bool,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.process_event_semantics (tenant_id, process_id, seq, semantics, has_wake)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        args![tenant, process_id, to_sql_int(seq), encoded, has_wake],
    )?;
    Ok(())
}

/// What the event at `seq` meant (nothing, when no row was recorded for it).
pub(super) fn select_semantics(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
    seq: u64,
) -> Result<EventSemantics> {
    let found: Option<String> = db.query_opt(
        "SELECT semantics FROM main.process_event_semantics
             WHERE tenant_id = ?1 AND process_id = ?2 AND seq = ?3",
        args![tenant, process_id, to_sql_int(seq)],
        |row| row.get(0),
    )?;
    match found {
        Some(text) => decode(&text),
        None => Ok(EventSemantics::default()),
    }
}

/// The sequences of the unacknowledged wake events after `after`, at most `limit`.
pub(super) fn select_unacked_wakes(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<u64>> {
    db.query_all(
        "SELECT s.seq FROM main.process_event_semantics s
         WHERE s.tenant_id = ?1 AND s.process_id = ?2 AND s.seq > ?3 AND s.has_wake = 1
           AND NOT EXISTS (SELECT 1 FROM main.process_wake_acks a
                           WHERE a.tenant_id = s.tenant_id AND a.process_id = s.process_id
                             AND a.seq = s.seq)
         ORDER BY s.seq LIMIT ?4",
        args![tenant, process_id, to_sql_int(after), sql_limit(limit)],
        |row| Ok(from_sql_int(row.get(0)?)),
    )
}

/// Acknowledges a wake; acknowledging it again changes nothing.
pub(super) fn insert_ack(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
    seq: u64,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.process_wake_acks (tenant_id, process_id, seq, acked_at_ms)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant_id, process_id, seq) DO NOTHING",
        args![tenant, process_id, to_sql_int(seq), now_ms],
    )?;
    Ok(())
}

/// Grants `scope_id` a handle on a process, or replaces the grant's descriptor.
pub(super) fn upsert_grant(
    db: Db<'_>,
    tenant: &str,
    grant: &HandleGrant,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.process_handle_grants (tenant_id, scope_id, process_id, session_id,
                                            descriptor, granted_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (tenant_id, scope_id, process_id)
         DO UPDATE SET session_id = ?4, descriptor = ?5",
        args![
            tenant,
            grant.scope_id,
            grant.process_id,
            grant.session_id,
            serde_json::to_string(&grant.descriptor)?,
            now_ms
        ],
    )?;
    Ok(())
}

/// Removes a grant; whether there was one.
pub(super) fn delete_grant(
    db: Db<'_>,
    tenant: &str,
    scope_id: &str,
    process_id: &str,
) -> Result<bool> {
    let deleted = db.execute(
        "DELETE FROM main.process_handle_grants
             WHERE tenant_id = ?1 AND scope_id = ?2 AND process_id = ?3",
        args![tenant, scope_id, process_id],
    )?;
    Ok(deleted > 0)
}

/// One grant, if it exists.
pub(super) fn select_grant(
    db: Db<'_>,
    tenant: &str,
    scope_id: &str,
    process_id: &str,
) -> Result<Option<HandleGrant>> {
    db.query_opt(
        "SELECT session_id, scope_id, process_id, descriptor FROM main.process_handle_grants
         WHERE tenant_id = ?1 AND scope_id = ?2 AND process_id = ?3",
        args![tenant, scope_id, process_id],
        grant_from_row,
    )
}

/// A scope's grants with their processes, in process id order (live only: running ones).
pub(super) fn select_scope_grants(
    db: Db<'_>,
    tenant: &str,
    scope_id: &str,
    live_only: bool,
    limit: usize,
) -> Result<Vec<(HandleGrant, ProcessRecord)>> {
    db.query_all(
        concat!(
            "SELECT g.session_id, g.scope_id, g.process_id, g.descriptor, p.process_id, ",
            "p.registration_hash, p.registration, p.status, p.await_output, p.external_ref,
         p.wait_state, p.wake_target, p.created_at_ms, p.updated_at_ms
         FROM main.process_handle_grants g
         JOIN main.processes p ON p.tenant_id = g.tenant_id AND p.process_id = g.process_id
         WHERE g.tenant_id = ?1 AND g.scope_id = ?2 AND (?3 = 0 OR p.status = 'running')
         ORDER BY g.process_id LIMIT ?4"
        ),
        args![tenant, scope_id, live_only, sql_limit(limit)],
        |row| Ok((grant_from_row(row)?, record_from_row_at(row, 4)?)),
    )
}

/// Every grant of one process, by session and scope.
pub(super) fn select_process_grants(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
    limit: usize,
) -> Result<Vec<HandleGrant>> {
    db.query_all(
        "SELECT session_id, scope_id, process_id, descriptor
         FROM main.process_handle_grants INDEXED BY process_grants_by_process
         WHERE tenant_id = ?1 AND process_id = ?2
         ORDER BY session_id, scope_id LIMIT ?3",
        args![tenant, process_id, sql_limit(limit)],
        grant_from_row,
    )
}

/// Every grant held by any scope of `session_id`.
pub(super) fn select_session_grants(
    db: Db<'_>,
    tenant: &str,
    session_id: &str,
) -> Result<Vec<HandleGrant>> {
    db.query_all(
        "SELECT session_id, scope_id, process_id, descriptor
         FROM main.process_handle_grants INDEXED BY process_grants_by_session
         WHERE tenant_id = ?1 AND session_id = ?2 ORDER BY process_id, scope_id",
        args![tenant, session_id],
        grant_from_row,
    )
}

/// Removes every grant of `session_id`; how many.
pub(super) fn delete_session_grants(db: Db<'_>, tenant: &str, session_id: &str) -> Result<u64> {
    let deleted = db.execute(
        "DELETE FROM main.process_handle_grants WHERE tenant_id = ?1 AND session_id = ?2",
        args![tenant, session_id],
    )?;
    Ok(deleted as u64)
}

/// Whether a process still has any grant.
pub(super) fn has_any_grant(db: Db<'_>, tenant: &str, process_id: &str) -> Result<bool> {
    let found: Option<i64> = db.query_opt(
        "SELECT 1 FROM main.process_handle_grants INDEXED BY process_grants_by_process
             WHERE tenant_id = ?1 AND process_id = ?2 LIMIT 1",
        args![tenant, process_id],
        |row| row.get(0),
    )?;
    Ok(found.is_some())
}

/// Clears every wake target that is a scope of `session_id` (finished processes too).
pub(super) fn clear_wake_targets(
    db: Db<'_>,
    tenant: &str,
    session_id: &str,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "UPDATE main.processes INDEXED BY processes_by_wake_session
         SET wake_target = NULL, wake_target_session = NULL, updated_at_ms = ?3
         WHERE tenant_id = ?1 AND wake_target_session = ?2",
        args![tenant, session_id, now_ms],
    )?;
    Ok(())
}

/// The ids of up to `limit` finished processes last changed before `cutoff_ms`.
pub(super) fn select_prunable(
    db: Db<'_>,
    tenant: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    db.query_all(
        "SELECT process_id FROM main.processes INDEXED BY processes_finished
         WHERE tenant_id = ?1 AND status <> 'running' AND updated_at_ms < ?2
         ORDER BY updated_at_ms, process_id LIMIT ?3",
        args![tenant, cutoff_ms, sql_limit(limit)],
        |row| row.get(0),
    )
}

/// Raises the tenant's fence floor to the process's last fencing token (before the process,
/// and its lease row with it, is deleted).
pub(super) fn raise_fence_floor(db: Db<'_>, tenant: &str, process_id: &str) -> Result<()> {
    db.execute(
        Query::per_engine(
            "INSERT INTO main.process_fence_floors (tenant_id, fencing_token)
             SELECT tenant_id, fencing_token FROM main.process_leases
             WHERE tenant_id = ?1 AND process_id = ?2
             ON CONFLICT (tenant_id)
             DO UPDATE SET fencing_token = max(fencing_token, excluded.fencing_token)",
            "INSERT INTO main.process_fence_floors AS floors (tenant_id, fencing_token)
             SELECT tenant_id, fencing_token FROM main.process_leases
             WHERE tenant_id = ?1 AND process_id = ?2
             ON CONFLICT (tenant_id)
             DO UPDATE SET fencing_token = GREATEST(floors.fencing_token, excluded.fencing_token)",
        ),
        args![tenant, process_id],
    )?;
    Ok(())
}

/// The tenant's fence floor (0 when no leased process has been pruned).
fn select_fence_floor(db: Db<'_>, tenant: &str) -> Result<u64> {
    let floor: Option<i64> = db.query_opt(
        "SELECT fencing_token FROM main.process_fence_floors WHERE tenant_id = ?1",
        args![tenant],
        |row| row.get(0),
    )?;
    Ok(floor.map_or(0, from_sql_int))
}

/// Deletes a process; its semantics, acks, grants and lease go with it (foreign keys).
pub(super) fn delete(db: Db<'_>, tenant: &str, process_id: &str) -> Result<()> {
    let state: Option<String> = db.query_opt(
        "DELETE FROM main.processes WHERE tenant_id = ?1 AND process_id = ?2
         RETURNING CASE WHEN wait_state IS NULL THEN status ELSE 'waiting' END",
        args![tenant, process_id],
        |row| row.get(0),
    )?;
    let Some(state) = state else { return Ok(()) };
    add_to_count(db, tenant, &state, -1)
}

/// Adds `delta` (negative: takes it away) to the count of the tenant's processes in `state`,
/// in the op that moves them: a count that reaches 0 goes (see the last section of
/// `schema.sql`).
fn add_to_count(db: Db<'_>, tenant: &str, state: &str, delta: i64) -> Result<()> {
    if delta > 0 {
        db.execute(
            "INSERT INTO main.process_counts AS c (tenant_id, state, total) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant_id, state) DO UPDATE SET total = c.total + excluded.total",
            args![tenant, state, delta],
        )?;
    } else if delta < 0 {
        db.execute(
            "DELETE FROM main.process_counts WHERE tenant_id = ?1 AND state = ?2 AND total <= ?3",
            args![tenant, state, -delta],
        )?;
        db.execute(
            "UPDATE main.process_counts SET total = total - ?3 WHERE tenant_id = ?1 AND state = ?2",
            args![tenant, state, -delta],
        )?;
    }
    Ok(())
}

/// The lease row of a process: the lease when one is held (live or lapsed), and the last
/// fencing token handed out (the tenant's fence floor when there has never been one).
pub(super) fn select_lease(
    db: Db<'_>,
    tenant: &str,
    process_id: &str,
) -> Result<(Option<ProcessLease>, u64)> {
    let found = db.query_opt(
        "SELECT owner_id, incarnation_id, liveness, lease_token, fencing_token, claimed_at_ms,
                expires_at_ms
         FROM main.process_leases WHERE tenant_id = ?1 AND process_id = ?2",
        args![tenant, process_id],
        |row| lease_from_row(row, process_id),
    )?;
    match found {
        Some(found) => Ok(found),
        None => Ok((None, select_fence_floor(db, tenant)?)),
    }
}

/// A lease row: the lease when one is held, and the last fencing token handed out.
fn lease_from_row(row: &Row<'_>, process_id: &str) -> Result<(Option<ProcessLease>, u64)> {
    let fence = from_sql_int(row.get(4)?);
    let (Some(owner_id), Some(lease_token)) =
        (row.get::<Option<String>>(0)?, row.get::<Option<String>>(3)?)
    else {
        return Ok((None, fence));
    };
    let liveness: Option<String> = row.get(2)?;
    let owner = LeaseOwner {
        incarnation_id: row.get::<Option<String>>(1)?.unwrap_or_else(|| owner_id.clone()),
        owner_id,
        liveness: liveness.map(|text| decode(&text)).transpose()?.unwrap_or_default(),
    };
    let lease = ProcessLease {
        process_id: process_id.to_owned(),
        owner,
        lease_token,
        fencing_token: fence,
        claimed_at_ms: row.get(5)?,
        expires_at_ms: row.get(6)?,
    };
    Ok((Some(lease), fence))
}

/// Writes a newly granted lease (its fencing token one past the last).
pub(super) fn upsert_lease(db: Db<'_>, tenant: &str, lease: &ProcessLease) -> Result<()> {
    db.execute("INSERT INTO main.process_leases (tenant_id, process_id, owner_id, incarnation_id, liveness,
                                     lease_token, fencing_token, claimed_at_ms, expires_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (tenant_id, process_id) DO UPDATE SET
             owner_id = ?3, incarnation_id = ?4, liveness = ?5, lease_token = ?6,
             fencing_token = ?7, claimed_at_ms = ?8, expires_at_ms = ?9", args![
        tenant,
        lease.process_id,
        lease.owner.owner_id,
        lease.owner.incarnation_id,
        serde_json::to_string(&lease.owner.liveness)?,
        lease.lease_token,
        to_sql_int(lease.fencing_token),
        lease.claimed_at_ms,
        lease.expires_at_ms
    ])?;
    Ok(())
}

/// Takes a live lease over from `observed`, in one statement that matches only while the
/// observed holder still holds it; whether it did.
pub(super) fn replace_observed_lease(
    db: Db<'_>,
    tenant: &str,
    observed: &ProcessLease,
    lease: &ProcessLease,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.process_leases
             SET owner_id = ?7, incarnation_id = ?8, liveness = ?9, lease_token = ?10,
                 fencing_token = ?11, claimed_at_ms = ?12, expires_at_ms = ?13
             WHERE tenant_id = ?1 AND process_id = ?2 AND owner_id = ?3 AND incarnation_id = ?4
               AND lease_token = ?5 AND fencing_token = ?6",
        args![
            tenant,
            observed.process_id,
            observed.owner.owner_id,
            observed.owner.incarnation_id,
            observed.lease_token,
            to_sql_int(observed.fencing_token),
            lease.owner.owner_id,
            lease.owner.incarnation_id,
            serde_json::to_string(&lease.owner.liveness)?,
            lease.lease_token,
            to_sql_int(lease.fencing_token),
            lease.claimed_at_ms,
            lease.expires_at_ms
        ],
    )?;
    Ok(changed == 1)
}

/// Moves a live lease's expiry, matching holder, token and fence in the same statement;
/// whether it did.
pub(super) fn extend_lease(
    db: Db<'_>,
    tenant: &str,
    lease: &ProcessLease,
    now_ms: i64,
    expires_at_ms: i64,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.process_leases SET expires_at_ms = ?7
             WHERE tenant_id = ?1 AND process_id = ?2 AND owner_id = ?3 AND incarnation_id = ?4
               AND lease_token = ?5 AND fencing_token = ?6 AND expires_at_ms > ?8",
        args![
            tenant,
            lease.process_id,
            lease.owner.owner_id,
            lease.owner.incarnation_id,
            lease.lease_token,
            to_sql_int(lease.fencing_token),
            expires_at_ms,
            now_ms
        ],
    )?;
    Ok(changed == 1)
}

/// Releases a lease held under `lease_token` and `fencing_token`, keeping the fencing token;
/// whether it did.
pub(super) fn release_lease(db: Db<'_>, tenant: &str, lease: &ProcessLease) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.process_leases
             SET owner_id = NULL, incarnation_id = NULL, liveness = NULL, lease_token = NULL,
                 claimed_at_ms = 0, expires_at_ms = 0
             WHERE tenant_id = ?1 AND process_id = ?2 AND lease_token = ?3 AND fencing_token = ?4",
        args![tenant, lease.process_id, lease.lease_token, to_sql_int(lease.fencing_token)],
    )?;
    Ok(changed == 1)
}

fn record_from_row(row: &Row<'_>) -> Result<ProcessRecord> {
    record_from_row_at(row, 0)
}

/// Reads a record from the columns `process_id, record_columns!()` starting at `at`.
fn record_from_row_at(row: &Row<'_>, at: usize) -> Result<ProcessRecord> {
    let registration: Registration = decode(&row.get::<String>(at + 2)?)?;
    let status = match row.get::<Option<String>>(at + 4)? {
        Some(output) => ProcessStatus::from_output(decode(&output)?),
        None => ProcessStatus::Running,
    };
    let created_at_ms = row.get(at + 8)?;
    Ok(ProcessRecord {
        id: row.get(at)?,
        wake_target: decode_opt(row.get(at + 7)?)?,
        updated_at_ms: row.get(at + 9)?,
        external_ref: decode_opt(row.get(at + 5)?)?,
        wait: decode_opt(row.get(at + 6)?)?,
        status,
        ..ProcessRecord::registered(registration, row.get(at + 1)?, created_at_ms)
    })
}

fn grant_from_row(row: &Row<'_>) -> Result<HandleGrant> {
    let descriptor: HandleDescriptor = decode(&row.get::<String>(3)?)?;
    Ok(HandleGrant {
        session_id: row.get(0)?,
        scope_id: row.get(1)?,
        process_id: row.get(2)?,
        descriptor,
    })
}

fn encode_opt<T: Serialize>(value: &Option<T>) -> Result<Option<String>> {
    Ok(value.as_ref().map(serde_json::to_string).transpose()?)
}

fn decode<T: DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text)
        .map_err(|error| Error::Corrupt(format!("a process registry row does not decode: {error}")))
}

fn decode_opt<T: DeserializeOwned>(text: Option<String>) -> Result<Option<T>> {
    text.map(|text| decode(&text)).transpose()
}
