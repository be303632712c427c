//! `JobGuard`: keeps the caller's own SQL from ending the batch's transaction or touching the
//! store's tables behind the ops' backs.
//!
//! While a job runs, an authorizer looks at every statement as it is prepared. Statements of
//! the crate's own ops run as *internal*; statements a transaction closure runs through
//! `Tx::sql` are the caller's. The caller's may read anything and write its own tables, but
//! not control the transaction (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`), not
//! write the store's tables (they are written only through ops, which keep their invariants),
//! and not attach triggers to them or drop or alter them. A commit hook also turns any commit
//! during a job into a rollback (a statement running in autocommit after SQLite rolled the
//! transaction back under the job).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

use crate::error::Result;

/// The store's own tables (every table `schema.sql` creates).
pub(crate) const OWN_TABLES: &[&str] = &[
    "tenants",
    "events",
    "event_keys",
    "stream_heads",
    "queue_items",
    "graphs",
    "graph_nodes",
    "graph_edges",
    "graph_tokens",
    "api_tokens",
    "processes",
    "process_event_semantics",
    "process_wake_acks",
    "process_handle_grants",
    "process_leases",
    "process_fence_floors",
    "workflow_definitions",
    "workflow_executions",
    "workflow_snapshots",
];

/// The flags the hooks read.
#[derive(Debug, Default)]
pub(crate) struct JobGuard {
    in_job: AtomicBool,
    internal: AtomicBool,
    /// The job's view is bound to a tenant by a token: its raw SQL may not even read the
    /// store's tables (they hold every tenant's rows).
    confined: AtomicBool,
}

impl JobGuard {
    /// Installs the hooks on `conn`; they stay idle until `enter`.
    pub(crate) fn install(conn: &mut Connection) -> Result<Arc<JobGuard>> {
        let guard = Arc::new(JobGuard::default());
        let for_commits = Arc::clone(&guard);
        conn.commit_hook(Some(move || for_commits.in_job.load(Ordering::Relaxed)))?;
        let for_statements = Arc::clone(&guard);
        conn.authorizer(Some(move |context: AuthContext<'_>| for_statements.authorize(&context)))?;
        Ok(guard)
    }

    /// A job starts running: an op's (`internal`) or a transaction closure's, for a view
    /// that is `confined` to its tenant or not.
    pub(crate) fn enter(&self, internal: bool, confined: bool) {
        self.internal.store(internal, Ordering::Relaxed);
        self.confined.store(confined, Ordering::Relaxed);
        self.in_job.store(true, Ordering::Relaxed);
    }

    /// The job is done.
    pub(crate) fn leave(&self) {
        self.in_job.store(false, Ordering::Relaxed);
        self.internal.store(false, Ordering::Relaxed);
    }

    /// Runs the crate's own work inside a job (an op composed into a closure, say).
    pub(crate) fn internal<T>(&self, f: impl FnOnce() -> T) -> T {
        let was = self.internal.swap(true, Ordering::Relaxed);
        let result = f();
        self.internal.store(was, Ordering::Relaxed);
        result
    }

    fn authorize(&self, context: &AuthContext<'_>) -> Authorization {
        let from_caller =
            self.in_job.load(Ordering::Relaxed) && !self.internal.load(Ordering::Relaxed);
        let confined = self.confined.load(Ordering::Relaxed);
        if from_caller
            && (refused_to_callers(&context.action) || confined && reads_own(&context.action))
        {
            Authorization::Deny
        } else {
            Authorization::Allow
        }
    }
}

/// What the caller's own SQL may not do during a job.
fn refused_to_callers(action: &AuthAction<'_>) -> bool {
    match action {
        AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => true,
        AuthAction::Insert { table_name }
        | AuthAction::Delete { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::DropTable { table_name }
        | AuthAction::AlterTable { table_name, .. }
        | AuthAction::CreateTrigger { table_name, .. }
        | AuthAction::CreateTempTrigger { table_name, .. }
        | AuthAction::DropTrigger { table_name, .. }
        | AuthAction::DropIndex { table_name, .. } => is_own_table(table_name),
        _ => false,
    }
}

/// Whether a statement reads one of the store's tables.
fn reads_own(action: &AuthAction<'_>) -> bool {
    matches!(action, AuthAction::Read { table_name, .. } if is_own_table(table_name))
}

fn is_own_table(name: &str) -> bool {
    OWN_TABLES.iter().any(|own| own.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_tables_are_every_table_of_the_schema() -> Result<()> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(include_str!("../../schema.sql"))?;
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             ORDER BY name",
        )?;
        let tables: Vec<String> =
            stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        let mut own: Vec<&str> = OWN_TABLES.to_vec();
        own.sort_unstable();
        assert_eq!(tables, own);
        Ok(())
    }
}
