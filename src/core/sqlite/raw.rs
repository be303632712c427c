//! `Sql`: the narrow handle a transaction closure gets for its own SQL (`Tx::sqlite`).
//!
//! The store's connection serves every batch of every caller, so a closure never holds it: the
//! handle offers statements only (prepare, execute, query), each seen by the call guard's
//! authorizer as it is prepared. Connection-level methods (limits, configuration flags, busy
//! timeout, user functions, interrupts, the statement cache) stay with the engine. Statements
//! are prepared afresh, never taken from the store's cache, where an already authorized
//! statement of the store's own could be found by its text.

use rusqlite::{Connection, Params, Row, Statement};

use crate::core::sqlite::guard::CallGuard;
use crate::error::{Error, Result};

/// SQL of the caller's own, inside the open transaction of a [`Store::transaction`] closure.
///
/// It may read and write the caller's own tables (and create, alter and drop them, their
/// indexes, views and triggers) in the same transaction as the store's operations: everything
/// commits or rolls back together. It may not change anything that would outlive the
/// transaction on the store's shared connection, nor go around the store's operations. Refused,
/// with [`Error::Forbidden`] naming what was refused; a closure with a refused statement is
/// refused whole (rolled back and answered `Forbidden`, even if it swallowed the error), so
/// nothing is written:
///
/// - writing, altering, dropping, indexing or putting triggers on the store's tables (use the
///   operations), and writing `sqlite_stat1`, `sqlite_stat4` or `sqlite_sequence`;
/// - `BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE` (compose with [`Tx::exec`] and
///   [`TxOutcome`](crate::TxOutcome));
/// - every `PRAGMA` except reading `application_id`, `collation_list`, `compile_options`,
///   `data_version`, `encoding`, `foreign_keys`, `freelist_count`, `function_list`,
///   `journal_mode`, `max_page_count`, `module_list`, `page_count`, `page_size`,
///   `pragma_list`, `query_only`, `schema_version`, `synchronous`, `user_version`, the schema
///   pragmas (`table_info`, `table_xinfo`, `table_list`, `index_list`, `index_info`,
///   `index_xinfo`, `foreign_key_list`) and, for the store owner's views, `integrity_check`
///   and `quick_check`;
/// - temporary tables, views, indexes, triggers and virtual tables (they would outlive the
///   transaction on the shared connection);
/// - `ATTACH`, `DETACH`, `ANALYZE`, and the functions `load_extension` and `fts3_tokenizer`;
/// - a foreign key from a table of the caller's to one of the store's tables (checked when the
///   closure returns: the whole closure is refused);
/// - taking more than `Limits::sql_steps_max` steps in one closure (`TooLarge`), or making a
///   string or blob longer than four payloads (at least 64 MiB): one caller cannot hold the
///   store's thread or its memory;
/// - for a view bound to its tenant by a token ([`Store::authenticate`]), reading the store's
///   tables, `dbstat` or any virtual table at all (they hold, or may read, every tenant's
///   rows), and creating triggers or virtual tables (a trigger runs with whoever fires it).
///
/// The caller's own tables are shared by every view of the store: keeping one tenant's rows
/// of them from another is the application's business.
///
/// [`Store::transaction`]: crate::Store::transaction
/// [`Store::authenticate`]: crate::Store::authenticate
/// [`Tx::exec`]: crate::Tx::exec
pub struct Sql<'a> {
    conn: &'a Connection,
    guard: &'a CallGuard,
}

impl std::fmt::Debug for Sql<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sql").finish_non_exhaustive()
    }
}

impl<'a> Sql<'a> {
    pub(crate) fn new(conn: &'a Connection, guard: &'a CallGuard) -> Self {
        Self { conn, guard }
    }

    /// Prepares one statement (not cached: every preparation is authorized afresh).
    ///
    /// # Errors
    /// `Forbidden` for what the caller's SQL may not do (see [`Sql`]); SQLite's error for a
    /// statement that does not compile.
    pub fn prepare(&self, sql: &str) -> Result<Statement<'a>> {
        self.conn.prepare(sql).map_err(|error| self.error(error))
    }

    /// Runs one statement with `params`; returns the number of rows it changed.
    ///
    /// # Errors
    /// As [`Sql::prepare`], and SQLite's error if the statement fails.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.conn.execute(sql, params).map_err(|error| self.error(error))
    }

    /// Runs every statement of `sql`, one after the other, without parameters.
    ///
    /// # Errors
    /// As [`Sql::execute`], for the first statement that fails (the earlier ones have run: the
    /// closure decides whether to roll back).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        self.conn.execute_batch(sql).map_err(|error| self.error(error))
    }

    /// Runs a query and maps its first row with `f`.
    ///
    /// # Errors
    /// As [`Sql::execute`]; SQLite's `QueryReturnedNoRows` when there is no row.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.conn.query_row(sql, params, f).map_err(|error| self.error(error))
    }

    /// A refused statement becomes `Forbidden` with the guard's reason; other errors map as
    /// usual.
    fn error(&self, error: rusqlite::Error) -> Error {
        let reason = self.guard.take_refusal();
        if is_interrupt(&error) {
            return self.guard.too_many_steps();
        }
        if code_of(&error) == Some(rusqlite::ErrorCode::TooBig) {
            let max = usize::try_from(self.guard.string_bytes_max()).unwrap_or(usize::MAX);
            return Error::too_large(
                "a string or blob of a closure's SQL",
                max,
                max.saturating_add(1),
            );
        }
        if !is_auth(&error) {
            return Error::from(error);
        }
        let reason = reason.unwrap_or_else(|| "a statement the store refuses".into());
        Error::Forbidden(format!("a transaction closure's SQL may not do this: {reason}"))
    }
}

fn code_of(error: &rusqlite::Error) -> Option<rusqlite::ErrorCode> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.code),
        rusqlite::Error::SqlInputError { error, .. } => Some(error.code),
        _ => None,
    }
}

fn is_interrupt(error: &rusqlite::Error) -> bool {
    code_of(error) == Some(rusqlite::ErrorCode::OperationInterrupted)
}

fn is_auth(error: &rusqlite::Error) -> bool {
    code_of(error) == Some(rusqlite::ErrorCode::AuthorizationForStatementDenied)
}
