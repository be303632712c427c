//! The SQL of periodic jobs (`queue_schedules`): every statement names the tenant, except the
//! store's own sweep across tenants, which reads which tenants have a tick due.

use crate::core::db::{Db, Row, args};
use crate::error::Result;

/// The columns `row_of` reads, in order.
const COLUMNS: &str = "name, queue, cron, time_zone, interval_ms, backfill_max, template, \
                       next_tick_ms, last_tick_ms, created_at_ms, updated_at_ms";

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScheduleRow {
    pub(super) name: String,
    pub(super) queue: String,
    pub(super) cron: Option<String>,
    pub(super) time_zone: Option<String>,
    pub(super) interval_ms: Option<i64>,
    pub(super) backfill_max: i64,
    /// The item template, as JSON text.
    pub(super) template: String,
    pub(super) next_tick_ms: Option<i64>,
    pub(super) last_tick_ms: Option<i64>,
    pub(super) created_at_ms: i64,
    pub(super) updated_at_ms: i64,
}

fn row_of(row: &Row<'_>) -> Result<ScheduleRow> {
    Ok(ScheduleRow {
        name: row.get(0)?,
        queue: row.get(1)?,
        cron: row.get(2)?,
        time_zone: row.get(3)?,
        interval_ms: row.get(4)?,
        backfill_max: row.get(5)?,
        template: row.get(6)?,
        next_tick_ms: row.get(7)?,
        last_tick_ms: row.get(8)?,
        created_at_ms: row.get(9)?,
        updated_at_ms: row.get(10)?,
    })
}

/// The schedule `name` of `tenant`.
pub(super) fn select(db: Db<'_>, tenant: &str, name: &str) -> Result<Option<ScheduleRow>> {
    let sql =
        format!("SELECT {COLUMNS} FROM main.queue_schedules WHERE tenant_id = ?1 AND name = ?2");
    db.query_opt(&sql, args![tenant, name], row_of)
}

/// `tenant`'s schedules named after `after`, by name, at most `limit`.
pub(super) fn select_page(
    db: Db<'_>,
    tenant: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<ScheduleRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM main.queue_schedules WHERE tenant_id = ?1 AND name > ?2
         ORDER BY name LIMIT ?3"
    );
    db.query_all(&sql, args![tenant, after, crate::page::sql_limit(limit)], row_of)
}

/// How many schedules `tenant` keeps.
pub(super) fn count(db: Db<'_>, tenant: &str) -> Result<i64> {
    db.query_one(
        "SELECT count(*) FROM main.queue_schedules WHERE tenant_id = ?1",
        args![tenant],
        |r| r.get(0),
    )
}

/// Writes `row` as `tenant`'s schedule of its name (a new one, or over the old).
pub(super) fn upsert(db: Db<'_>, tenant: &str, row: &ScheduleRow) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_schedules (tenant_id, name, queue, cron, time_zone, interval_ms,
             backfill_max, template, next_tick_ms, last_tick_ms, created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT (tenant_id, name) DO UPDATE SET
             queue = excluded.queue, cron = excluded.cron, time_zone = excluded.time_zone,
             interval_ms = excluded.interval_ms, backfill_max = excluded.backfill_max,
             template = excluded.template, next_tick_ms = excluded.next_tick_ms,
             last_tick_ms = excluded.last_tick_ms, updated_at_ms = excluded.updated_at_ms",
        args![
            tenant,
            row.name,
            row.queue,
            row.cron,
            row.time_zone,
            row.interval_ms,
            row.backfill_max,
            row.template,
            row.next_tick_ms,
            row.last_tick_ms,
            row.created_at_ms,
            row.updated_at_ms
        ],
    )?;
    Ok(())
}

/// Deletes `tenant`'s schedule `name`; whether there was one.
pub(super) fn delete(db: Db<'_>, tenant: &str, name: &str) -> Result<bool> {
    let deleted = db.execute(
        "DELETE FROM main.queue_schedules WHERE tenant_id = ?1 AND name = ?2",
        args![tenant, name],
    )?;
    Ok(deleted > 0)
}

/// `tenant`'s schedules with a tick due at `now_ms`, earliest first, at most `limit`.
pub(super) fn select_due(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<ScheduleRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM main.queue_schedules
         WHERE tenant_id = ?1 AND next_tick_ms <= ?2 ORDER BY next_tick_ms, name LIMIT ?3"
    );
    db.query_all(&sql, args![tenant, now_ms, limit as i64], row_of)
}

/// Moves schedule `name`'s next tick from `fired_ms` on to `next_ms`, with `last_ms` its
/// latest tick fired: only if it still holds `fired_ms`, so that of two firings of one tick
/// (two processes) one moves it and the other finds it moved. Whether this one moved it.
pub(super) fn advance(
    db: Db<'_>,
    tenant: &str,
    name: &str,
    (fired_ms, next_ms, last_ms): (i64, Option<i64>, Option<i64>),
    now_ms: i64,
) -> Result<bool> {
    let moved = db.execute(
        "UPDATE main.queue_schedules
         SET next_tick_ms = ?4, last_tick_ms = coalesce(?5, last_tick_ms), updated_at_ms = ?6
         WHERE tenant_id = ?1 AND name = ?2 AND next_tick_ms = ?3",
        args![tenant, name, fired_ms, next_ms, last_ms, now_ms],
    )?;
    Ok(moved == 1)
}

/// The tenants with a schedule due at `now_ms`, the longest due first (at most `limit`). A
/// suspended or archived tenant's schedules wait (its writes are refused: they fire once it is
/// active again, by their catch-up).
pub(super) fn select_tenants_due(db: Db<'_>, now_ms: i64, limit: usize) -> Result<Vec<String>> {
    db.query_all(
        "SELECT s.tenant_id FROM main.queue_schedules AS s
         WHERE s.next_tick_ms <= ?1
           AND NOT EXISTS (SELECT 1 FROM main.tenants AS t
                           WHERE t.tenant_id = s.tenant_id AND t.status <> 'active')
         GROUP BY s.tenant_id ORDER BY min(s.next_tick_ms), s.tenant_id LIMIT ?2",
        args![now_ms, limit as i64],
        |r| r.get(0),
    )
}

/// The earliest tick of every schedule of every active tenant.
pub(super) fn select_next_tick(db: Db<'_>) -> Result<Option<i64>> {
    db.query_one(
        "SELECT min(s.next_tick_ms) FROM main.queue_schedules AS s
         WHERE s.next_tick_ms IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM main.tenants AS t
                           WHERE t.tenant_id = s.tenant_id AND t.status <> 'active')",
        args![],
        |r| r.get(0),
    )
}

/// The earliest tick of `tenant`'s schedules of `queue`.
pub(super) fn select_next_tick_of(db: Db<'_>, tenant: &str, queue: &str) -> Result<Option<i64>> {
    db.query_one(
        "SELECT min(next_tick_ms) FROM main.queue_schedules WHERE tenant_id = ?1 AND queue = ?2",
        args![tenant, queue],
        |r| r.get(0),
    )
}
