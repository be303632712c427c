//! `PgSql`: the handle a transaction closure gets for its own SQL on a PostgreSQL store
//! (`Tx::postgres`), the PostgreSQL twin of `Sql`.
//!
//! PostgreSQL has no authorizer a connection can install, so this is a guardrail, not a
//! sandbox: one statement per call (the extended protocol refuses more), never transaction
//! control or the session statements (`SET`, `RESET`, `LISTEN`, ...: those would end or outlive
//! the batch's transaction on the store's shared connection; a function such as `set_config`
//! is not refused, and what it changes is the caller's to answer for), each statement under a savepoint of its own (a failed one
//! spoils nothing else of the batch), and no raw SQL at all for a view bound to its tenant by
//! a token (it could read every tenant's rows). What the caller's tables may hold, and whether
//! it may touch the store's, is for the database's roles to say.

use postgres::Row;
use postgres::types::ToSql;

use crate::core::postgres::session::PgConn;
use crate::error::{Error, Result};

/// SQL of the caller's own, inside the open transaction of a [`Store::transaction`] closure on
/// a PostgreSQL store: it commits or rolls back with the store's operations.
///
/// Refused with [`Error::Forbidden`], writing nothing: transaction control (`BEGIN`, `COMMIT`,
/// `ROLLBACK`, `SAVEPOINT`, `RELEASE`, `PREPARE TRANSACTION`, ...), session state (`SET`,
/// `RESET`, `DISCARD`, `LISTEN`, `UNLISTEN`, `NOTIFY`, `LOAD`), and more than one statement in
/// a call.
///
/// [`Store::transaction`]: crate::Store::transaction
pub struct PgSql<'a> {
    conn: &'a PgConn,
}

impl std::fmt::Debug for PgSql<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSql").finish_non_exhaustive()
    }
}

/// The first words of statements a caller's SQL may not run.
const REFUSED: [&str; 16] = [
    "ABORT",
    "BEGIN",
    "CHECKPOINT",
    "COMMIT",
    "DISCARD",
    "END",
    "LISTEN",
    "LOAD",
    "NOTIFY",
    "PREPARE",
    "RELEASE",
    "RESET",
    "ROLLBACK",
    "SAVEPOINT",
    "SET",
    "START",
];

impl<'a> PgSql<'a> {
    pub(crate) fn new(conn: &'a PgConn) -> Self {
        Self { conn }
    }

    /// Runs one statement with `params`; returns the number of rows it changed.
    ///
    /// # Errors
    /// `Forbidden` for what the caller's SQL may not do; PostgreSQL's error (mapped like the
    /// store's own) for a statement that fails, which is rolled back alone.
    pub fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        check(sql)?;
        self.conn.caller_statement(|client| client.execute(sql, params))
    }

    /// Runs one query with `params`; returns its rows.
    ///
    /// # Errors
    /// As [`PgSql::execute`].
    pub fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        check(sql)?;
        self.conn.caller_statement(|client| client.query(sql, params))
    }
}

/// Refuses transaction control and session state.
fn check(sql: &str) -> Result<()> {
    let first: String = sql
        .trim_start_matches(|c: char| c.is_whitespace() || c == '(')
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_uppercase();
    if REFUSED.contains(&first.as_str()) {
        tracing::warn!(statement = %first, "spindle: a transaction closure's SQL was refused");
        return Err(Error::Forbidden(format!(
            "a transaction closure's SQL may not run {first}: compose with Tx::exec and TxOutcome"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_control_and_session_state_are_refused_and_the_rest_passes() {
        for sql in ["COMMIT", "  begin", "SET search_path = x", "rollback to s", "(SAVEPOINT a)"] {
            assert!(matches!(check(sql), Err(Error::Forbidden(_))), "{sql}");
        }
        for sql in ["SELECT 1", "INSERT INTO mine VALUES (1)", "WITH x AS (SELECT 1) SELECT 1"] {
            assert!(check(sql).is_ok(), "{sql}");
        }
    }
}
