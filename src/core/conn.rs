//! The connection an actor owns, of either engine: each step of the batch loop, sent to the
//! engine's own connection (`sqlite::conn::SqliteConn`, `postgres::session::PgConn`).
//!
//! The actor's batch loop is the same for both engines; it asks this module for every step
//! that differs.

// Without the `postgres` feature the SQLite engine is the only one.
#![cfg_attr(not(feature = "postgres"), allow(irrefutable_let_patterns))]

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::core::db::Db;
use crate::core::msg::Applied;
#[cfg(feature = "postgres")]
use crate::core::postgres::session::PgConn;
use crate::core::publish::{LiveRequest, Publisher};
use crate::core::schema::Location;
use crate::core::sqlite::conn::SqliteConn;
use crate::core::state::ActorState;
use crate::core::tx::{LateWrite, SqliteParts};
use crate::core::value::borrow_args;
use crate::error::{Error, Result};
use crate::options::Options;

/// The actor's connection.
pub(crate) enum Conn {
    Sqlite(Box<SqliteConn>),
    #[cfg(feature = "postgres")]
    Postgres(Box<PgConn>),
}

impl Conn {
    /// Opens the store at `location`: the file or memory of the SQLite engine, or a PostgreSQL
    /// database.
    /// `state` is the actor's (a PostgreSQL store rings its bell for other processes' work).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn open(
        location: &Location,
        options: &Options,
        state: &Arc<ActorState>,
    ) -> Result<Self> {
        match location {
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => {
                let conn =
                    crate::core::postgres::session::open(url, options, Arc::downgrade(state))?;
                Ok(Conn::Postgres(Box::new(conn)))
            }
            _ => Ok(Conn::Sqlite(Box::new(SqliteConn::open(location, options)?))),
        }
    }

    /// Opens a reader's connection to the store at `location` (see `readers.rs`): read-only,
    /// statements that would write refused by the engine itself, and on PostgreSQL a session
    /// without a listener of its own (the writer's hears other processes' commits).
    pub(crate) fn open_reader(location: &Location, options: &Options) -> Result<Self> {
        let options = Options { read_only: true, ..options.clone() };
        match location {
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => Ok(Conn::Postgres(Box::new(
                crate::core::postgres::session::open_reader(url, &options)?,
            ))),
            _ => Ok(Conn::Sqlite(Box::new(SqliteConn::open(location, &options)?))),
        }
    }

    /// The connection, for statements.
    pub(crate) fn db(&self) -> Db<'_> {
        match self {
            Conn::Sqlite(lite) => Db::sqlite(lite.connection()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => Db::postgres(pg),
        }
    }

    /// What a `Tx` gets of the SQLite engine's own parts (none on another engine).
    pub(crate) fn sqlite_parts(&self) -> Option<SqliteParts<'_>> {
        match self {
            Conn::Sqlite(lite) => Some(lite.parts()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => None,
        }
    }

    /// Whether every call must run under a savepoint of its own: on PostgreSQL a failed
    /// statement spoils the whole transaction until it is rolled back to one.
    pub(crate) fn needs_savepoints(&self) -> bool {
        !matches!(self, Conn::Sqlite(_))
    }

    /// Whether a writing batch locks its tenants' writers at its start (see `begin`).
    pub(crate) fn locks_tenants(&self) -> bool {
        !matches!(self, Conn::Sqlite(_))
    }

    /// The seed of the store's randomness: `Options::seed`, and for a writable shared store
    /// (a file, a database) also what it holds or who opens it, and the time, so that each
    /// session of a seeded store makes ids of its own.
    pub(crate) fn seed(&self, location: &Location, options: &Options) -> Result<Option<u64>> {
        let Some(seed) = options.seed else {
            return Ok(None);
        };
        if matches!(location, Location::Memory) || options.read_only {
            return Ok(Some(seed));
        }
        let mut hasher = Sha256::new();
        hasher.update(seed.to_le_bytes());
        match self {
            Conn::Sqlite(lite) => hasher.update(lite.content_digest()?),
            // Many processes open one database at once: each opening makes ids of its own.
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => hasher.update(pg.next_opening()?.to_le_bytes()),
        }
        hasher.update(options.clock.now_ms().to_le_bytes());
        let mut first = [0_u8; 8];
        first.copy_from_slice(&hasher.finalize()[..8]);
        Ok(Some(u64::from_le_bytes(first)))
    }

    /// Opens the batch's transaction: one that takes the write lock at once when the batch
    /// writes, a deferred (read-only) one when it only reads. `tenants` are those the batch's
    /// writing calls run for: on PostgreSQL each one's writers are serialised across processes
    /// from here to the commit (SQLite's one writer lock does that for the whole file).
    ///
    /// Those among them in `shared` are the tenants all of whose calls share the turn
    /// (`Sealed::shares_turn`): on PostgreSQL such batches run beside each other
    /// (`PgConn::begin`).
    ///
    /// Returns what it read of `tenants`' statuses on the way (PostgreSQL reads each one's
    /// `tenants.status` with its head, `None` without a row), in their order; nothing on SQLite.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn begin(
        &self,
        writes: bool,
        tenants: &[Arc<str>],
        shared: &[Arc<str>],
    ) -> Result<Vec<Option<String>>> {
        match self {
            Conn::Sqlite(_) => self
                .statement(if writes { "BEGIN IMMEDIATE" } else { "BEGIN DEFERRED" })
                .map(|()| Vec::new()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.begin(writes, tenants, shared),
        }
    }

    /// Opens a transaction as `begin` does; on PostgreSQL without a round trip of its own
    /// (`PgConn::begin_ahead`): `None` then, the statuses to be read with `start_statuses`.
    pub(crate) fn begin_ahead(
        &self,
        writes: bool,
        tenants: &[Arc<str>],
        shared: &[Arc<str>],
    ) -> Result<Option<Vec<Option<String>>>> {
        match self {
            Conn::Sqlite(_) => self.begin(writes, tenants, shared).map(Some),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.begin_ahead(writes, tenants, shared).map(|()| None),
        }
    }

    /// The statuses a start opened by `begin_ahead` read, once it has answered (sent now if it
    /// has not and `send_now`); `None` if it has not.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn start_statuses(&self, send_now: bool) -> Result<Option<Vec<Option<String>>>> {
        match self {
            Conn::Sqlite(_) => Ok(None),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.start_statuses(send_now),
        }
    }

    /// Why the last transaction's start sent ahead failed, if it did (PostgreSQL:
    /// `PgConn::take_start_failure`).
    pub(crate) fn take_start_failure(&self) -> Option<Error> {
        match self {
            Conn::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.take_start_failure(),
        }
    }

    /// Sends what waits to go ahead of the next statement (PostgreSQL: `PgConn::send_ahead`).
    pub(crate) fn send_ahead(&self) -> Result<()> {
        match self {
            Conn::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.send_ahead(),
        }
    }

    /// Whether the call about to run is the only one of its transaction, undone by rolling it back
    /// (PostgreSQL sends such a call's events with its next statement: `PgConn::defer_events`).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn set_only_call(&self, only: bool) {
        #[cfg(feature = "postgres")]
        if let Conn::Postgres(pg) = self {
            pg.set_only_call(only);
        }
    }

    /// Runs one of the actor's control statements (`BEGIN` on SQLite, and the call savepoints
    /// `SAVEPOINT_OP`, `RELEASE_OP`, `ROLLBACK_TO_OP`); on PostgreSQL a release is sent with
    /// the next of them, or with the commit (`PgConn::savepoint_statement`).
    pub(crate) fn statement(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(_) => self.db().execute(sql, &[]).map(drop),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.savepoint_statement(sql),
        }
    }

    /// Whether a transaction is open (SQLite ends one by itself on some failures).
    pub(crate) fn in_transaction(&self) -> bool {
        match self {
            Conn::Sqlite(lite) => lite.in_transaction(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.in_transaction(),
        }
    }

    /// Commits the open transaction (`writes`: it wrote; `rang`: it made work available, for
    /// the engine that tells other processes so).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn commit(&self, writes: bool, rang: bool) -> Result<()> {
        match self {
            Conn::Sqlite(_) => self.statement("COMMIT"),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.commit(writes, rang),
        }
    }

    /// Rolls back the open transaction.
    pub(crate) fn rollback(&self) -> Result<()> {
        match self {
            Conn::Sqlite(lite) => lite.rollback(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.rollback(),
        }
    }

    /// A call starts: the guard learns whose SQL runs.
    pub(crate) fn enter_call(&self, internal: bool, confined: bool) {
        if let Conn::Sqlite(lite) = self {
            lite.enter_call(internal, confined);
        }
    }

    /// The call has ended.
    pub(crate) fn leave_call(&self) {
        if let Conn::Sqlite(lite) = self {
            lite.leave_call();
        }
    }

    /// The verdict on a call that just ran, before its savepoint is settled: it is overruled
    /// (rolled back, answered with the error) if the guard refused one of its statements or
    /// cut its SQL off, or if its SQL changed the connection (the problem is returned: the
    /// connection must be put back) or made a foreign key into the store's tables. Defence in
    /// depth behind the guard: a closure's SQL must leave the connection as every later batch
    /// expects it.
    pub(crate) fn vet(&self, applied: Applied, caller_sql: bool) -> (Applied, Option<String>) {
        match self {
            Conn::Sqlite(lite) => lite.vet(applied, caller_sql),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => (applied, None),
        }
    }

    /// Puts the connection's settings back after a refused closure and checks that they took.
    pub(crate) fn restore_connection(&mut self) -> Result<()> {
        match self {
            Conn::Sqlite(lite) => lite.restore_connection(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => Ok(()),
        }
    }

    /// Sends `late` (writes calls left for their batch's end, in order) ahead of the
    /// transaction's next statement on PostgreSQL; runs them now on SQLite (where no call
    /// leaves any: see `Tx::set_writes_late`).
    pub(crate) fn write_ahead(&self, late: &[LateWrite]) -> Result<()> {
        for write in late {
            let args = borrow_args(&write.args);
            match self {
                Conn::Sqlite(_) => self.db().execute(write.sql, &args).map(drop)?,
                #[cfg(feature = "postgres")]
                Conn::Postgres(pg) => pg.write_ahead(write.sql, &args)?,
            }
        }
        Ok(())
    }

    /// Whether a writing batch may commit: the store's file must still be at its path.
    pub(crate) fn check_before_commit(&self, writes: bool) -> Result<()> {
        match self {
            Conn::Sqlite(lite) => lite.check_before_commit(writes),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => Ok(()),
        }
    }

    /// A batch committed.
    pub(crate) fn committed(&mut self, writes: bool) {
        if let Conn::Sqlite(lite) = self {
            lite.committed(writes);
        }
    }

    /// Whether an idle moment has work to do (a checkpoint).
    pub(crate) fn idle_work(&self) -> bool {
        match self {
            Conn::Sqlite(lite) => lite.idle_work(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => false,
        }
    }

    /// What an idle moment is for: a passive checkpoint.
    pub(crate) fn idle(&mut self) {
        if let Conn::Sqlite(lite) = self {
            lite.idle();
        }
    }

    /// Runs a checkpoint if the WAL has grown past its schedule.
    pub(crate) fn schedule_checkpoint(&mut self) {
        if let Conn::Sqlite(lite) = self {
            lite.schedule_checkpoint();
        }
    }

    /// Drops the live subscribers if another process committed since last asked: they cannot
    /// have seen its events, and page from their cursors instead.
    pub(crate) fn notice_foreign_writes(&self, publisher: &mut Publisher) {
        publisher.notice_foreign_writes(self.foreign_version());
    }

    /// Before a batch's events are published: drops the live subscribers if a tenant the
    /// batch took in its middle showed another process's appends (PostgreSQL; a SQLite
    /// writer held the whole file from the batch's start, where this was looked at already).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn notice_foreign_writes_at_commit(&self, publisher: &mut Publisher) {
        #[cfg(feature = "postgres")]
        if let Conn::Postgres(pg) = self {
            publisher.notice_foreign_writes(pg.foreign_commits());
        }
    }

    /// Whether a statement lost to another transaction since the last look (a deadlock or a
    /// serialisation failure on PostgreSQL; SQLite's one writer loses to none).
    pub(crate) fn take_conflict(&self) -> bool {
        match self {
            Conn::Sqlite(_) => false,
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.take_conflict(),
        }
    }

    /// Takes a subscriber live (see `Publisher::go_live`).
    pub(crate) fn go_live(&self, publisher: &mut Publisher, request: LiveRequest) -> Result<()> {
        publisher.go_live(self.db(), self.foreign_version(), request)
    }

    /// A number that moves whenever another connection commits, or `None` when it cannot be
    /// known (which drops the live subscribers: paging is always safe). SQLite's is the
    /// connection's `PRAGMA data_version`; PostgreSQL's counts the commits of other processes
    /// (heard as notices, and found at a writing batch's start).
    fn foreign_version(&self) -> Option<i64> {
        match self {
            Conn::Sqlite(lite) => lite.foreign_version(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.foreign_commits(),
        }
    }

    /// Checkpoints and closes the connection; a spare in-memory one (see `fresh`) serves the
    /// next store when nothing was changed behind the checks.
    pub(crate) fn close(self, poisoned: bool) -> Result<()> {
        match self {
            Conn::Sqlite(lite) => lite.close(poisoned),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.close(),
        }
    }
}
