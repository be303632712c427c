//! The engine seam: one handle over the open transaction's connection, whichever engine it is.
//!
//! Domains write their statements once where the SQL is the same on both engines, and side by
//! side ([`Query::per_engine`]) where it is not. Both texts follow SQLite's conventions:
//! numbered parameters (`?1`), tables named in `main.`, and index hints (`INDEXED BY`); the
//! PostgreSQL engine rewrites those three mechanically and nothing else. Arguments are
//! [`Arg`]s (built by `args![]` the way `rusqlite::params![]` is used) and rows are read
//! through [`Row::get`], so a domain decodes its rows once for both engines.

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, params_from_iter};

#[cfg(feature = "postgres")]
use crate::core::postgres::session::PgConn;
use crate::error::{Error, Result};

/// The savepoint every call of a batch runs under (unless it needs none), and the statements
/// that keep or undo its work: the same text on both engines.
pub(crate) const SAVEPOINT_OP: &str = "SAVEPOINT op";
pub(crate) const RELEASE_OP: &str = "RELEASE op";
pub(crate) const ROLLBACK_TO_OP: &str = "ROLLBACK TO op";

/// The connection of the open transaction, for the crate's own statements.
#[derive(Clone, Copy)]
pub(crate) enum Db<'a> {
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

/// One argument of a statement, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// SQL's NULL (a `None`).
    Null,
    /// An integer (also a `bool`, as 0 or 1).
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text (ids, JSON).
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
    /// Texts (NULLs among them) as one PostgreSQL array, for a set-based statement's
    /// `unnest`: only in PostgreSQL's own texts (SQLite refuses it).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Texts(&'a [Option<&'a str>]),
    /// Integers as one PostgreSQL array (see `Texts`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Ints(&'a [i64]),
}

/// An argument owned, for statements built at run time with a varying number of arguments.
#[derive(Debug, Clone)]
pub(crate) enum OwnedArg {
    Int(i64),
    Real(f64),
    Text(String),
}

impl ToArg for OwnedArg {
    fn to_arg(&self) -> Arg<'_> {
        match self {
            OwnedArg::Int(value) => Arg::Int(*value),
            OwnedArg::Real(value) => Arg::Real(*value),
            OwnedArg::Text(text) => Arg::Text(text),
        }
    }
}

/// Borrows owned arguments as a statement's.
pub(crate) fn borrow_args(values: &[OwnedArg]) -> Vec<Arg<'_>> {
    values.iter().map(ToArg::to_arg).collect()
}

/// A value that can be a statement's argument.
pub(crate) trait ToArg {
    /// The value as an argument.
    fn to_arg(&self) -> Arg<'_>;
}

/// The arguments of a statement, each borrowed: `args![tenant, id, now_ms]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::core::db::ToArg::to_arg(&$value)),*] as &[$crate::core::db::Arg<'_>]
    };
}
pub(crate) use args;

/// A row of a result, of either engine.
pub(crate) enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    #[cfg(feature = "postgres")]
    Postgres(&'r postgres::Row),
}

/// A value a column can be read as.
pub(crate) trait Column: rusqlite::types::FromSql {}

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
    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(crate) fn execute<'q>(self, sql: impl Into<Query<'q>>, args: &[Arg<'_>]) -> Result<usize> {
        let sql = sql.into();
        match self {
            Db::Sqlite(conn) => {
                Ok(conn.prepare_cached(sql.sqlite)?.execute(params_from_iter(args))?)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.execute(sql.postgres_text(), args),
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
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                let mut rows = stmt.query(params_from_iter(args))?;
                rows.next()?.map(|row| map(&Row::Sqlite(row))).transpose()
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => {
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
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                let mut rows = stmt.query(params_from_iter(args))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(map(&Row::Sqlite(row))?);
                }
                Ok(out)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => {
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
        if let Db::Postgres(conn) = self {
            conn.event_appended(tenant, position);
        }
    }

    /// Hands an op's events (`insert_all_sql!`'s statement, `sql`, and its `args`, appended to
    /// `tenant`) to the engine to send with the transaction's next statement; returns whether
    /// it took them (PostgreSQL, for the only call of a transaction: `PgConn::defer_events`),
    /// else the caller runs the statement itself.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn defer_events(self, sql: &str, args: &[Arg<'_>], tenant: &str) -> Result<bool> {
        match self {
            Db::Sqlite(_) => Ok(false),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.defer_events(sql, args, tenant),
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
        match self {
            Db::Sqlite(conn) => {
                conn.prepare_cached(sql.sqlite)?.execute(params_from_iter(args))?;
                Ok(conn.last_insert_rowid())
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => self.query_one(sql, args, |row| row.get(0)),
        }
    }

    /// Holds off every other connection's writers of `tenant` until this transaction ends
    /// (a no-op for a tenant already held: a writing batch holds its calls' tenants from its
    /// start, so this only waits for a tenant taken some other way). SQLite's one writer does
    /// this already.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn lock_tenant_writes(self, tenant: &str) -> Result<()> {
        match self {
            Db::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.lock_tenant(tenant),
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
        match self {
            Db::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.try_lock_tenant(tenant),
        }
    }

    /// Makes this transaction the only one, among every process on the database, running
    /// the sweep `name` until it ends; `false` when another runs it now. SQLite's one writer
    /// makes every sweep the only one already.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn try_lock_sweep(self, name: &str) -> Result<bool> {
        match self {
            Db::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.try_lock_sweep(name),
        }
    }

    /// Whether this store is the only writable one open on its database, and if so keeps
    /// every other from opening until [`Db::release_alone`] (or this connection ends): what
    /// recovering interrupted work at open needs, since work another live process runs is not
    /// interrupted. A SQLite file store asks its presence lock instead (`Tx::hold_alone`);
    /// one that has none (in memory, on a VFS of the caller's own) is alone.
    pub(crate) fn hold_alone(self) -> Result<bool> {
        match self {
            Db::Sqlite(_) => Ok(true),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.hold_alone(),
        }
    }

    /// Lets other stores open again after [`Db::hold_alone`] returned `true`.
    pub(crate) fn release_alone(self) -> Result<()> {
        match self {
            Db::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Db::Postgres(conn) => conn.release_alone(),
        }
    }

    /// Whether this is a PostgreSQL connection: for the few statements whose best form
    /// differs in shape, not only in text (one round trip on PostgreSQL where SQLite, with no
    /// round trips, keeps two simpler statements).
    pub(crate) fn is_postgres(self) -> bool {
        !matches!(self, Db::Sqlite(_))
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

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(value) => ValueRef::Integer(value),
            Arg::Real(value) => ValueRef::Real(value),
            Arg::Text(text) => ValueRef::Text(text.as_bytes()),
            Arg::Blob(bytes) => ValueRef::Blob(bytes),
            Arg::Texts(_) | Arg::Ints(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    "an array is a PostgreSQL statement's argument only".into(),
                ));
            }
        }))
    }
}

impl ToArg for Arg<'_> {
    fn to_arg(&self) -> Arg<'_> {
        *self
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for bool {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}

impl ToArg for f64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

/// Integers that always fit an `i64`.
macro_rules! int_args {
    ($($ty:ty),*) => {$(
        impl ToArg for $ty {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Int(i64::from(*self))
            }
        }
    )*};
}
int_args!(i64, i32, u32, u16, u8);

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        self.as_ref().map_or(Arg::Null, ToArg::to_arg)
    }
}

impl<T: Column> Column for Option<T> {}
impl Column for i64 {}
impl Column for u32 {}
impl Column for bool {}
impl Column for f64 {}
impl Column for String {}
impl Column for Vec<u8> {}
