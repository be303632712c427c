//! The engine seam: one handle over the open transaction's connection, whichever engine it is.
//!
//! Domains write their statements once where the SQL is the same on both engines, and side by
//! side ([`Query::per_engine`]) where it is not. Both texts follow SQLite's conventions:
//! numbered parameters (`?1`), tables named in `main.`, and index hints (`INDEXED BY`); the
//! PostgreSQL engine rewrites those three mechanically and nothing else. Arguments are
//! [`Arg`]s (built by `args![]` the way `rusqlite::params![]` is used) and rows are read
//! through [`Row::get`], so a domain decodes its rows once for both engines.

use rusqlite::{Connection, params_from_iter};

#[cfg(feature = "postgres")]
use crate::core::postgres::session::PgConn;
pub(crate) use crate::core::value::{
    Arg, Column, OwnedArg, RELEASE_OP, ROLLBACK_TO_OP, SAVEPOINT_OP, args, borrow_args,
};
use crate::error::{Error, Result};

/// The connection of the open transaction, for the crate's own statements. Opaque above the
/// engine: a domain runs statements through it and never reaches the connection itself (only
/// `core` builds one or looks inside).
#[derive(Clone, Copy)]
pub(crate) struct Db<'a> {
    engine: Engine<'a>,
}

/// Which engine's connection a [`Db`] runs on.
#[derive(Clone, Copy)]
enum Engine<'a> {
    /// The store's SQLite connection.
    Sqlite(&'a Connection),
    /// The store's PostgreSQL connection.
    #[cfg(feature = "postgres")]
    Postgres(&'a PgConn),
}

/// A statement's text: one for both engines, or one for each.
#[derive(Clone, Copy)]
pub(crate) struct Query<'q> {
    sqlite: &'q str,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    postgres: Option<&'q str>,
}

impl<'q> Query<'q> {
    /// A statement whose SQLite and PostgreSQL texts differ in more than the dialect's
    /// mechanical differences (see the module header).
    pub(crate) const fn per_engine(sqlite: &'q str, postgres: &'q str) -> Self {
        Self { sqlite, postgres: Some(postgres) }
    }

    /// The text the PostgreSQL engine prepares (before its dialect rewrite).
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_text(&self) -> &'q str {
        self.postgres.unwrap_or(self.sqlite)
    }
}

impl<'q> From<&'q str> for Query<'q> {
    fn from(sql: &'q str) -> Self {
        Self { sqlite: sql, postgres: None }
    }
}

impl<'q> From<&'q String> for Query<'q> {
    fn from(sql: &'q String) -> Self {
        Self { sqlite: sql, postgres: None }
    }
}

/// A row of a result, of either engine.
pub(crate) enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    #[cfg(feature = "postgres")]
    Postgres(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `index` (from 0) as a `T`.
    pub(crate) fn get<T: Column>(&self, index: usize) -> Result<T> {
        match self {
            Row::Sqlite(row) => Ok(row.get(index)?),
            #[cfg(feature = "postgres")]
            Row::Postgres(row) => crate::core::postgres::session::column(row, index),
        }
    }
}

impl<'a> Db<'a> {
    /// The seam over a SQLite connection.
    pub(in crate::core) fn sqlite(conn: &'a Connection) -> Self {
        Self { engine: Engine::Sqlite(conn) }
    }

    /// The seam over a PostgreSQL session.
    #[cfg(feature = "postgres")]
    pub(in crate::core) fn postgres(conn: &'a PgConn) -> Self {
        Self { engine: Engine::Postgres(conn) }
    }

    /// The PostgreSQL session under the seam, if that is its engine (`Tx::postgres`).
    #[cfg(feature = "postgres")]
    pub(in crate::core) fn postgres_session(self) -> Option<&'a PgConn> {
        match self.engine {
            Engine::Postgres(conn) => Some(conn),
            Engine::Sqlite(_) => None,
        }
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(crate) fn execute<'q>(self, sql: impl Into<Query<'q>>, args: &[Arg<'_>]) -> Result<usize> {
        let sql = sql.into();
        match self.engine {
            Engine::Sqlite(conn) => {
                Ok(conn.prepare_cached(sql.sqlite)?.execute(params_from_iter(args))?)
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.execute(sql.postgres_text(), args),
        }
    }

    /// The first row of a query mapped by `map`, if there is one.
    pub(crate) fn query_opt<'q, T>(
        self,
        sql: impl Into<Query<'q>>,
        args: &[Arg<'_>],
        map: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let sql = sql.into();
        match self.engine {
            Engine::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                let mut rows = stmt.query(params_from_iter(args))?;
                rows.next()?.map(|row| map(&Row::Sqlite(row))).transpose()
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => {
                let rows = conn.query(sql.postgres_text(), args)?;
                rows.first().map(|row| map(&Row::Postgres(row))).transpose()
            }
        }
    }

    /// The first row of a query that always returns one (an aggregate), mapped by `map`.
    pub(crate) fn query_one<'q, T>(
        self,
        sql: impl Into<Query<'q>>,
        args: &[Arg<'_>],
        map: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, args, map)?
            .ok_or(Error::Sqlite(crate::error::SqliteError(rusqlite::Error::QueryReturnedNoRows)))
    }

    /// Every row of a query, each mapped by `map`.
    pub(crate) fn query_all<'q, T>(
        self,
        sql: impl Into<Query<'q>>,
        args: &[Arg<'_>],
        mut map: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let sql = sql.into();
        match self.engine {
            Engine::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                let mut rows = stmt.query(params_from_iter(args))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(map(&Row::Sqlite(row))?);
                }
                Ok(out)
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => {
                let rows = conn.query(sql.postgres_text(), args)?;
                rows.iter().map(|row| map(&Row::Postgres(row))).collect()
            }
        }
    }

    /// Notes that this transaction appended an event to `tenant` at `position`: the
    /// PostgreSQL engine then knows where it leaves the tenant without reading it again.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn event_appended(self, tenant: &str, position: i64) {
        #[cfg(feature = "postgres")]
        if let Engine::Postgres(conn) = self.engine {
            conn.event_appended(tenant, position);
        }
    }

    /// Hands an op's events (`insert_all_sql!`'s statement, `sql`, and its `args`, appended to
    /// `tenant`) to the engine to send with the transaction's next statement; returns whether
    /// it took them (PostgreSQL, for the only call of a transaction: `PgConn::defer_events`),
    /// else the caller runs the statement itself.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn defer_events(self, sql: &str, args: &[Arg<'_>], tenant: &str) -> Result<bool> {
        match self.engine {
            Engine::Sqlite(_) => Ok(false),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.defer_events(sql, args, tenant),
        }
    }

    /// Runs an `INSERT` of one row and returns the row's integer key: SQLite's rowid; on
    /// PostgreSQL, the statement's text for it ends `RETURNING` that column.
    pub(crate) fn insert_rowid<'q>(
        self,
        sql: impl Into<Query<'q>>,
        args: &[Arg<'_>],
    ) -> Result<i64> {
        let sql = sql.into();
        match self.engine {
            Engine::Sqlite(conn) => {
                conn.prepare_cached(sql.sqlite)?.execute(params_from_iter(args))?;
                Ok(conn.last_insert_rowid())
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => self.query_one(sql, args, |row| row.get(0)),
        }
    }

    /// Holds off every other connection's writers of `tenant` until this transaction ends
    /// (a no-op for a tenant already held: a writing batch holds its calls' tenants from its
    /// start, so this only waits for a tenant taken some other way). SQLite's one writer does
    /// this already.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn lock_tenant_writes(self, tenant: &str) -> Result<()> {
        match self.engine {
            Engine::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.lock_tenant(tenant),
        }
    }

    /// Holds off every other connection's writers of `tenant` until this transaction ends,
    /// if nobody else holds them now; `false` when another does (a no-op `true` for a tenant
    /// already held). For the store's sweeps across tenants: a writing batch holds its own
    /// tenants from its start, and a sweep never waits for another's in the middle of a
    /// batch (holding some while waiting for others is how two transactions deadlock).
    /// Positions then commit in the order they are taken, a stream's next `seq` is read after
    /// the last one committed, and what a sweep reads of the tenant stays as read. SQLite's
    /// one writer does this already.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn try_lock_tenant_writes(self, tenant: &str) -> Result<bool> {
        match self.engine {
            Engine::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.try_lock_tenant(tenant),
        }
    }

    /// Makes this transaction the only one, among every process on the database, running
    /// the sweep `name` until it ends; `false` when another runs it now. SQLite's one writer
    /// makes every sweep the only one already.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn try_lock_sweep(self, name: &str) -> Result<bool> {
        match self.engine {
            Engine::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.try_lock_sweep(name),
        }
    }

    /// Whether this store is the only writable one open on its database, and if so keeps
    /// every other from opening until [`Db::release_alone`] (or this connection ends): what
    /// recovering interrupted work at open needs, since work another live process runs is not
    /// interrupted. A SQLite file store asks its presence lock instead (`Tx::hold_alone`);
    /// one that has none (in memory, on a VFS of the caller's own) is alone.
    pub(crate) fn hold_alone(self) -> Result<bool> {
        match self.engine {
            Engine::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.hold_alone(),
        }
    }

    /// Lets other stores open again after [`Db::hold_alone`] returned `true`.
    pub(crate) fn release_alone(self) -> Result<()> {
        match self.engine {
            Engine::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Engine::Postgres(conn) => conn.release_alone(),
        }
    }

    /// Whether this is a PostgreSQL connection: for the few statements whose best form
    /// differs in shape, not only in text (one round trip on PostgreSQL where SQLite, with no
    /// round trips, keeps two simpler statements).
    pub(crate) fn is_postgres(self) -> bool {
        !matches!(self.engine, Engine::Sqlite(_))
    }

    /// The value of the first column of the first row, if there is a row.
    pub(crate) fn query_value<'q, T: Column>(
        self,
        sql: impl Into<Query<'q>>,
        args: &[Arg<'_>],
    ) -> Result<Option<T>> {
        self.query_opt(sql, args, |row| row.get(0))
    }
}
