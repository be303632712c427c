//! The workflows' SQL: every statement, and the mapping of rows back to definitions,
//! executions and snapshots. Every statement names the tenant. The functions that insert an
//! execution, change its status or delete it also write its count in `workflow_counts`
//! (`add_to_count`), in the same op.

use crate::core::db::{Db, Row, args};

use super::{Definition, Execution, ExecutionFilter, Snapshot, WorkflowStatus};
use crate::error::{Error, Result};
use crate::page::{Page, from_sql_int, sql_limit, to_sql_int};

/// The columns `execution_from_row` reads, in order.
macro_rules! execution_columns {
    () => {
        "execution_id, workflow_id, workflow_version, status, input, state, state_version,
         created_at_ms, updated_at_ms, completed_at_ms"
    };
}

/// A listing's statement: `$index` serves the filter in `$filter` (parameters 2 and 3).
macro_rules! list_sql {
    ($index:literal, $filter:literal) => {
        concat!(
            "SELECT ",
            execution_columns!(),
            " FROM main.workflow_executions INDEXED BY ",
            $index,
            " WHERE tenant_id = ?1 AND ",
            $filter,
            " AND execution_id < ?4 ORDER BY execution_id DESC LIMIT ?5"
        )
    };
}

/// Inserts a new definition version, numbered `def_seq` among the workflow's versions.
pub(super) fn insert_definition(
    db: Db<'_>,
    tenant: &str,
    definition: &Definition,
    ir_hash: &str,
    def_seq: i64,
) -> Result<()> {
    db.execute("INSERT INTO main.workflow_definitions (tenant_id, workflow_id, version, ir, ir_hash, def_seq,
                                           created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", args![
        tenant,
        definition.workflow_id,
        definition.version,
        serde_json::to_string(&definition.ir)?,
        ir_hash,
        def_seq,
        definition.created_at_ms
    ])?;
    Ok(())
}

/// One version of a definition with its content hash.
pub(super) fn select_definition(
    db: Db<'_>,
    tenant: &str,
    workflow_id: &str,
    version: &str,
) -> Result<Option<(Definition, String)>> {
    db.query_opt(
        "SELECT workflow_id, version, ir, created_at_ms, ir_hash FROM main.workflow_definitions
         WHERE tenant_id = ?1 AND workflow_id = ?2 AND version = ?3",
        args![tenant, workflow_id, version],
        |row| Ok((definition_from_row(row)?, row.get(4)?)),
    )
}

/// The version put last.
pub(super) fn select_latest_definition(
    db: Db<'_>,
    tenant: &str,
    workflow_id: &str,
) -> Result<Option<Definition>> {
    db.query_opt(
        "SELECT workflow_id, version, ir, created_at_ms FROM main.workflow_definitions
         WHERE tenant_id = ?1 AND workflow_id = ?2 ORDER BY def_seq DESC LIMIT 1",
        args![tenant, workflow_id],
        definition_from_row,
    )
}

/// The number the workflow's next version takes.
pub(super) fn next_def_seq(db: Db<'_>, tenant: &str, workflow_id: &str) -> Result<i64> {
    let last: i64 = db.query_one(
        "SELECT COALESCE(max(def_seq), 0) FROM main.workflow_definitions
             WHERE tenant_id = ?1 AND workflow_id = ?2",
        args![tenant, workflow_id],
        |row| row.get(0),
    )?;
    Ok(last + 1)
}

/// The workflow's versions in the order they were put.
pub(super) fn select_versions(
    db: Db<'_>,
    tenant: &str,
    workflow_id: &str,
    limit: usize,
) -> Result<Vec<String>> {
    db.query_all(
        "SELECT version FROM main.workflow_definitions
         WHERE tenant_id = ?1 AND workflow_id = ?2 ORDER BY def_seq LIMIT ?3",
        args![tenant, workflow_id, sql_limit(limit)],
        |row| row.get(0),
    )
}

/// Inserts a new execution.
pub(super) fn insert_execution(db: Db<'_>, tenant: &str, execution: &Execution) -> Result<()> {
    db.execute(
        concat!(
            "INSERT INTO main.workflow_executions (tenant_id, ",
            execution_columns!(),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        ),
        args![
            tenant,
            execution.id,
            execution.workflow_id,
            execution.workflow_version,
            execution.status.as_str(),
            serde_json::to_string(&execution.input)?,
            serde_json::to_string(&execution.state)?,
            to_sql_int(execution.state_version),
            execution.created_at_ms,
            execution.updated_at_ms,
            execution.completed_at_ms
        ],
    )?;
    add_to_count(db, tenant, execution.status, 1)
}

/// One execution.
pub(super) fn select_execution(db: Db<'_>, tenant: &str, id: &str) -> Result<Option<Execution>> {
    db.query_opt(
        concat!(
            "SELECT ",
            execution_columns!(),
            " FROM main.workflow_executions WHERE tenant_id = ?1 AND execution_id = ?2"
        ),
        args![tenant, id],
        execution_from_row,
    )
}

/// One execution's status.
pub(super) fn select_status(db: Db<'_>, tenant: &str, id: &str) -> Result<Option<WorkflowStatus>> {
    db.query_opt(
        "SELECT status FROM main.workflow_executions WHERE tenant_id = ?1 AND execution_id = ?2",
        args![tenant, id],
        |row| status_from(&row.get::<String>(0)?),
    )
}

/// A page of executions, newest first; each filter shape reads the index that serves it.
/// How many of the tenant's executions are in each status, by status, from
/// `workflow_counts`: at most seven rows.
pub(super) fn count_executions(db: Db<'_>, tenant: &str) -> Result<Vec<(WorkflowStatus, u64)>> {
    db.query_all(
        "SELECT status, total FROM main.workflow_counts WHERE tenant_id = ?1 ORDER BY status",
        args![tenant],
        |row| Ok((status_from(&row.get::<String>(0)?)?, from_sql_int(row.get(1)?))),
    )
}

/// The tenant's kept execution counts (`workflow_counts`) and a recount of its executions,
/// each as `("executions STATUS", total)`.
pub(super) fn select_counts_and_recount(
    db: Db<'_>,
    tenant: &str,
) -> Result<[Vec<(String, u64)>; 2]> {
    let row = |r: &Row<'_>| -> Result<(String, u64)> {
        Ok((format!("executions {}", r.get::<String>(0)?), from_sql_int(r.get(1)?)))
    };
    let kept = db.query_all(
        "SELECT status, total FROM main.workflow_counts WHERE tenant_id = ?1",
        args![tenant],
        row,
    )?;
    let counted = db.query_all(
        "SELECT status, count(*) FROM main.workflow_executions WHERE tenant_id = ?1
         GROUP BY status",
        args![tenant],
        row,
    )?;
    Ok([kept, counted])
}

pub(super) fn list_executions(
    db: Db<'_>,
    tenant: &str,
    filter: &ExecutionFilter,
    page: &Page,
) -> Result<Vec<Execution>> {
    let sql = match (&filter.status, &filter.workflow_id) {
        (Some(_), Some(_)) => {
            list_sql!("workflow_executions_by_workflow_status", "status = ?2 AND workflow_id = ?3")
        }
        (Some(_), None) => {
            list_sql!("workflow_executions_by_status", "status = ?2 AND CAST(?3 AS TEXT) IS NULL")
        }
        (None, Some(_)) => {
            list_sql!(
                "workflow_executions_by_workflow",
                "CAST(?2 AS TEXT) IS NULL AND workflow_id = ?3"
            )
        }
        (None, None) => {
            // The primary key's index: SQLite names it after the table's first key constraint.
            list_sql!(
                "sqlite_autoindex_workflow_executions_1",
                "CAST(?2 AS TEXT) IS NULL AND CAST(?3 AS TEXT) IS NULL"
            )
        }
    };
    let status = filter.status.map(WorkflowStatus::as_str);
    // Ids are UUID v7 text: every id sorts below this one.
    let after = page.after.as_deref().unwrap_or("~");
    let limit = sql_limit(page.limit);
    db.query_all(sql, args![tenant, status, filter.workflow_id, after, limit], execution_from_row)
}

/// Writes a new status (and, for a terminal one, the completion time).
/// Writes the execution's status (moved from `from`) and its times.
pub(super) fn update_status(
    db: Db<'_>,
    tenant: &str,
    execution: &Execution,
    from: WorkflowStatus,
) -> Result<()> {
    let changed = db.execute(
        "UPDATE main.workflow_executions SET status = ?3, updated_at_ms = ?4, completed_at_ms = ?5
             WHERE tenant_id = ?1 AND execution_id = ?2",
        args![
            tenant,
            execution.id,
            execution.status.as_str(),
            execution.updated_at_ms,
            execution.completed_at_ms
        ],
    )?;
    Error::expect_one(changed, "execution", &execution.id)?;
    if from != execution.status {
        add_to_count(db, tenant, from, -1)?;
        add_to_count(db, tenant, execution.status, 1)?;
    }
    Ok(())
}

/// Writes a new state if the stored version is still `expected_version`; whether it did.
pub(super) fn update_state(
    db: Db<'_>,
    tenant: &str,
    execution: &Execution,
    expected_version: u64,
) -> Result<bool> {
    let changed = db.execute(
        "UPDATE main.workflow_executions SET state = ?3, state_version = ?4, updated_at_ms = ?5
             WHERE tenant_id = ?1 AND execution_id = ?2 AND state_version = ?6",
        args![
            tenant,
            execution.id,
            serde_json::to_string(&execution.state)?,
            to_sql_int(execution.state_version),
            execution.updated_at_ms,
            to_sql_int(expected_version)
        ],
    )?;
    Ok(changed == 1)
}

/// Inserts a snapshot.
pub(super) fn insert_snapshot(
    db: Db<'_>,
    tenant: &str,
    snapshot: &Snapshot,
    encoded: &str,
    state_hash: &str,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.workflow_snapshots (tenant_id, execution_id, at_seq, state, state_hash,
                                         created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![
            tenant,
            snapshot.execution_id,
            to_sql_int(snapshot.at_seq),
            encoded,
            state_hash,
            snapshot.created_at_ms
        ],
    )?;
    Ok(())
}

/// The snapshot at `at_seq` with its state hash.
pub(super) fn select_snapshot(
    db: Db<'_>,
    tenant: &str,
    id: &str,
    at_seq: u64,
) -> Result<Option<(Snapshot, String)>> {
    db.query_opt(
        "SELECT execution_id, at_seq, state, created_at_ms, state_hash FROM main.workflow_snapshots
         WHERE tenant_id = ?1 AND execution_id = ?2 AND at_seq = ?3",
        args![tenant, id, to_sql_int(at_seq)],
        |row| Ok((snapshot_from_row(row)?, row.get(4)?)),
    )
}

/// The snapshot at the highest sequence.
pub(super) fn select_latest_snapshot(
    db: Db<'_>,
    tenant: &str,
    id: &str,
) -> Result<Option<Snapshot>> {
    db.query_opt(
        "SELECT execution_id, at_seq, state, created_at_ms FROM main.workflow_snapshots
         WHERE tenant_id = ?1 AND execution_id = ?2 ORDER BY at_seq DESC LIMIT 1",
        args![tenant, id],
        snapshot_from_row,
    )
}

/// Deletes an execution (its snapshots go with it); whether it existed.
pub(super) fn delete_execution(db: Db<'_>, tenant: &str, id: &str) -> Result<bool> {
    let status: Option<String> = db.query_opt(
        "DELETE FROM main.workflow_executions WHERE tenant_id = ?1 AND execution_id = ?2
         RETURNING status",
        args![tenant, id],
        |row| row.get(0),
    )?;
    let Some(status) = status else { return Ok(false) };
    add_to_count(db, tenant, status_from(&status)?, -1)?;
    Ok(true)
}

/// Adds `delta` (negative: takes it away) to the count of the tenant's executions in
/// `status`, in the op that moves them: a count that reaches 0 goes (see the last section of
/// `schema.sql`).
fn add_to_count(db: Db<'_>, tenant: &str, status: WorkflowStatus, delta: i64) -> Result<()> {
    let status = status.as_str();
    if delta > 0 {
        db.execute(
            "INSERT INTO main.workflow_counts AS c (tenant_id, status, total) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant_id, status) DO UPDATE SET total = c.total + excluded.total",
            args![tenant, status, delta],
        )?;
    } else if delta < 0 {
        db.execute(
            "DELETE FROM main.workflow_counts WHERE tenant_id = ?1 AND status = ?2 AND total <= ?3",
            args![tenant, status, -delta],
        )?;
        db.execute(
            "UPDATE main.workflow_counts SET total = total - ?3 WHERE tenant_id = ?1 AND status = ?2",
            args![tenant, status, -delta],
        )?;
    }
    Ok(())
}

fn definition_from_row(row: &Row<'_>) -> Result<Definition> {
    Ok(Definition {
        workflow_id: row.get(0)?,
        version: row.get(1)?,
        ir: decode(&row.get::<String>(2)?)?,
        created_at_ms: row.get(3)?,
    })
}

fn execution_from_row(row: &Row<'_>) -> Result<Execution> {
    let status: String = row.get(3)?;
    Ok(Execution {
        id: row.get(0)?,
        workflow_id: row.get(1)?,
        workflow_version: row.get(2)?,
        status: status_from(&status)?,
        input: decode(&row.get::<String>(4)?)?,
        state: decode(&row.get::<String>(5)?)?,
        state_version: from_sql_int(row.get(6)?),
        created_at_ms: row.get(7)?,
        updated_at_ms: row.get(8)?,
        completed_at_ms: row.get(9)?,
    })
}

fn status_from(text: &str) -> Result<WorkflowStatus> {
    WorkflowStatus::parse(text)
        .ok_or_else(|| Error::Corrupt(format!("unknown workflow status {text:?}")))
}

fn snapshot_from_row(row: &Row<'_>) -> Result<Snapshot> {
    Ok(Snapshot {
        execution_id: row.get(0)?,
        at_seq: from_sql_int(row.get(1)?),
        state: decode(&row.get::<String>(2)?)?,
        created_at_ms: row.get(3)?,
    })
}

fn decode(text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text)
        .map_err(|error| Error::Corrupt(format!("a workflow row does not decode: {error}")))
}
