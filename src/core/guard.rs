//! `JobGuard`: keeps a job from ending or reshaping the batch's transaction behind the actor's
//! back.
//!
//! While a job runs, an authorizer refuses every transaction and savepoint statement the job
//! prepares itself (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE` through `Tx::sql`),
//! and a commit hook turns any commit into a rollback (a statement that runs in autocommit
//! after SQLite rolled the transaction back under the job). The crate's own savepoints inside a
//! job run through [`JobGuard::internal`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

use crate::error::Result;

/// The two flags the hooks read.
#[derive(Debug, Default)]
pub(crate) struct JobGuard {
    in_job: AtomicBool,
    internal: AtomicBool,
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

    /// A job starts running.
    pub(crate) fn enter(&self) {
        self.in_job.store(true, Ordering::Relaxed);
    }

    /// The job is done.
    pub(crate) fn leave(&self) {
        self.in_job.store(false, Ordering::Relaxed);
    }

    /// Runs the crate's own transaction-control statement inside a job.
    pub(crate) fn internal<T>(&self, f: impl FnOnce() -> T) -> T {
        self.internal.store(true, Ordering::Relaxed);
        let result = f();
        self.internal.store(false, Ordering::Relaxed);
        result
    }

    fn authorize(&self, context: &AuthContext<'_>) -> Authorization {
        let controls_transaction =
            matches!(context.action, AuthAction::Transaction { .. } | AuthAction::Savepoint { .. });
        let from_job =
            self.in_job.load(Ordering::Relaxed) && !self.internal.load(Ordering::Relaxed);
        if controls_transaction && from_job { Authorization::Deny } else { Authorization::Allow }
    }
}
