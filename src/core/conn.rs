//! The connection an actor owns, of either engine: transaction control, and what only the SQLite
//! engine has around it (the job guard and the connection settings a caller's SQL must leave
//! alone, WAL checkpoints, the file's identity, spare in-memory connections, other processes'
//! commits seen through `data_version`).
//!
//! The actor's batch loop is the same for both engines; it asks this module for every step
//! that differs.

// Without the `postgres` feature the SQLite engine is the only one.
#![cfg_attr(not(feature = "postgres"), allow(irrefutable_let_patterns))]

use std::cell::RefCell;
use std::sync::Arc;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;
use sha2::{Digest, Sha256};

use crate::core::checkpoint::WalSchedule;
use crate::core::db::Db;
use crate::core::fresh;
use crate::core::guard::{ConnectionState, JobGuard, SchemaLinks};
use crate::core::identity::FileWatch;
use crate::core::msg::Applied;
#[cfg(feature = "postgres")]
use crate::core::pg::PgConn;
use crate::core::presence::Presence;
use crate::core::publish::{LiveRequest, Publisher};
use crate::core::schema::{self, Kept, Location};
use crate::core::state::ActorState;
use crate::core::tx::SqliteParts;
use crate::error::{Error, Result};
use crate::options::Options;

/// The page cache of a read-only connection (a reader's), in KiB (SQLite reads a negative
/// `cache_size` as KiB): 16 MiB, pages allocated as they are used.
const READER_CACHE_KIB: i64 = -16 * 1024;

/// How much of the file a read-only connection reads through a memory map instead of a
/// `pread` per page: 1 GiB of address space, mapped as it is read (the operating system's
/// page cache, shared, not the process's own memory). A stream's page of events at a million
/// events read 1.7x faster (scale bench, BENCHMARKS.md). The cost: an I/O error while reading a
/// mapped page is a SIGBUS rather than an error; readers only read, so no write is lost by it.
const READER_MMAP_BYTES: i64 = 1 << 30;

/// The actor's connection.
pub(crate) enum Conn {
    Sqlite(Box<SqliteConn>),
    #[cfg(feature = "postgres")]
    Postgres(Box<PgConn>),
}

/// The SQLite engine's connection and what the actor keeps with it.
pub(crate) struct SqliteConn {
    pub(crate) conn: Connection,
    wal: WalSchedule,
    /// Keeps jobs from ending or reshaping the batch's transaction.
    guard: std::sync::Arc<JobGuard>,
    /// The connection's settings as opened: what a caller's SQL must leave them as.
    connection: ConnectionState,
    /// The foreign keys from callers' tables into the store's, as of a schema version
    /// (refreshed by a closure's first `Tx::sqlite`, read again after it).
    schema: RefCell<SchemaLinks>,
    /// The store's file as opened: a writing batch commits only while its path still names it
    /// (`None` in memory, read-only, or where identities cannot be read).
    file: Option<FileWatch>,
    /// A writable file store's presence on its file, held from the open to the close (see
    /// `core::presence`); `None` in memory, read-only, or on a VFS of the caller's own.
    presence: Option<Presence>,
    /// Whether the connection is a writable in-memory store's, which serves the next one once
    /// this one closes (see `fresh`). One capped by `Options::file_bytes_max`, or on another
    /// VFS, is not.
    spare_at_close: bool,
    read_only: bool,
    /// How long a statement waits for a lock another connection holds (`Options::busy_timeout`):
    /// put back after a checkpoint, which waits for nobody.
    busy_timeout: std::time::Duration,
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
                let conn = crate::core::pg::open(url, options, Arc::downgrade(state))?;
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
            Location::Postgres(url) => {
                Ok(Conn::Postgres(Box::new(crate::core::pg::open_reader(url, &options)?)))
            }
            _ => Ok(Conn::Sqlite(Box::new(SqliteConn::open(location, &options)?))),
        }
    }

    /// The connection, for statements.
    pub(crate) fn db(&self) -> Db<'_> {
        match self {
            Conn::Sqlite(lite) => Db::Sqlite(&lite.conn),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => Db::Postgres(pg),
        }
    }

    /// What a `Tx` gets of the SQLite engine's own parts (none on another engine).
    pub(crate) fn sqlite_parts(&self) -> Option<SqliteParts<'_>> {
        match self {
            Conn::Sqlite(lite) => Some(SqliteParts {
                conn: &lite.conn,
                guard: &lite.guard,
                schema: &lite.schema,
                presence: lite.presence.as_ref(),
            }),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => None,
        }
    }

    /// Whether every job must run under a savepoint of its own: on PostgreSQL a failed
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
            Conn::Sqlite(lite) => hasher.update(schema::content_digest(&lite.conn)?),
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
    /// writing jobs run for: on PostgreSQL each one's writers are serialised across processes
    /// from here to the commit (SQLite's one writer lock does that for the whole file).
    ///
    /// Returns what it read of `tenants`' statuses on the way (PostgreSQL reads each one's
    /// `tenants.status` with its head, `None` without a row), in their order; nothing on SQLite.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn begin(&self, writes: bool, tenants: &[Arc<str>]) -> Result<Vec<Option<String>>> {
        match self {
            Conn::Sqlite(_) => self
                .statement(if writes { "BEGIN IMMEDIATE" } else { "BEGIN DEFERRED" })
                .map(|()| Vec::new()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.begin(writes, tenants),
        }
    }

    /// Opens a transaction as `begin` does; on PostgreSQL without a round trip of its own
    /// (`PgConn::begin_ahead`): `None` then, the statuses to be read with `start_statuses`.
    pub(crate) fn begin_ahead(
        &self,
        writes: bool,
        tenants: &[Arc<str>],
    ) -> Result<Option<Vec<Option<String>>>> {
        match self {
            Conn::Sqlite(_) => self.begin(writes, tenants).map(Some),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.begin_ahead(writes, tenants).map(|()| None),
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

    /// Whether the job about to run is alone in its transaction, undone by rolling it back
    /// (PostgreSQL sends such a job's events with its next statement: `PgConn::defer_events`).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn set_job_alone(&self, alone: bool) {
        #[cfg(feature = "postgres")]
        if let Conn::Postgres(pg) = self {
            pg.set_job_alone(alone);
        }
    }

    /// Runs one of the actor's control statements (`BEGIN` on SQLite, and the job savepoints
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
            Conn::Sqlite(lite) => !lite.conn.is_autocommit(),
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
            Conn::Sqlite(lite) => Ok(lite.conn.execute_batch("ROLLBACK")?),
            #[cfg(feature = "postgres")]
            Conn::Postgres(pg) => pg.rollback(),
        }
    }

    /// A job starts: the guard learns whose SQL runs.
    pub(crate) fn enter_job(&self, internal: bool, confined: bool) {
        if let Conn::Sqlite(lite) = self {
            lite.guard.enter(internal, confined);
        }
    }

    /// The job has ended.
    pub(crate) fn leave_job(&self) {
        if let Conn::Sqlite(lite) = self {
            lite.guard.leave();
        }
    }

    /// The verdict on a job that just ran, before its savepoint is settled: it is overruled
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

    /// Whether a writing batch may commit: the store's file must still be at its path.
    pub(crate) fn check_before_commit(&self, writes: bool) -> Result<()> {
        match self {
            Conn::Sqlite(lite) => match lite.file.as_ref().filter(|_| writes) {
                Some(file) => file.check(),
                None => Ok(()),
            },
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => Ok(()),
        }
    }

    /// A batch committed.
    pub(crate) fn committed(&mut self, writes: bool) {
        if let Conn::Sqlite(lite) = self {
            lite.wal.dirty |= writes;
        }
    }

    /// Whether an idle moment has work to do (a checkpoint).
    pub(crate) fn idle_work(&self) -> bool {
        match self {
            Conn::Sqlite(lite) => lite.wal.dirty,
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => false,
        }
    }

    /// What an idle moment is for: a passive checkpoint.
    pub(crate) fn idle(&mut self) {
        if let Conn::Sqlite(lite) = self
            && lite.wal.dirty
            && lite.wal.may_retry()
        {
            lite.checkpoint(CheckpointMode::PASSIVE);
        }
    }

    /// Runs a checkpoint if the WAL has grown past its schedule.
    pub(crate) fn schedule_checkpoint(&mut self) {
        if let Conn::Sqlite(lite) = self
            && let Some(mode) = lite.wal.due()
        {
            lite.checkpoint(mode);
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
            Conn::Sqlite(lite) => {
                lite.conn.query_row("PRAGMA data_version", [], |row| row.get(0)).ok()
            }
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

impl SqliteConn {
    fn open(location: &Location, options: &Options) -> Result<Self> {
        let opened = schema::open(location, options)?;
        let mut conn = opened.conn;
        let wal = WalSchedule::install(&mut conn, location, options.wal_bytes_max)?;
        let spare_at_close = matches!(location, Location::Memory)
            && !options.read_only
            && options.vfs.is_none()
            && options.file_bytes_max.is_none();
        let (guard, schema) = match opened.kept {
            Some(Kept { guard, schema }) => {
                guard.configure(&conn, &options.limits)?;
                (guard, schema)
            }
            None => {
                let guard = JobGuard::install(&mut conn, &options.limits)?;
                let schema = SchemaLinks::new(&conn, &guard);
                (guard, schema)
            }
        };
        if options.read_only {
            // What would write fails in SQLite itself, whatever asked for it.
            conn.pragma_update(None, "query_only", true)?;
            // A reader pages through tables larger than SQLite's default 2 MiB cache (a
            // stream's page of events spread over as many table pages): keep more of them,
            // and read the rest through a memory map.
            conn.pragma_update(None, "cache_size", READER_CACHE_KIB)?;
            conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES)?;
        }
        let connection = ConnectionState::read(&conn)?;
        // A VFS of the caller's own need not keep its files in the operating system's.
        let (file, presence) = match location {
            Location::File(path) if !options.read_only && options.vfs.is_none() => {
                (FileWatch::new(path), Some(Presence::join(path, options.busy_timeout)?))
            }
            _ => (None, None),
        };
        Ok(Self {
            conn,
            wal,
            guard,
            connection,
            schema: RefCell::new(schema),
            file,
            presence,
            spare_at_close,
            read_only: options.read_only,
            busy_timeout: options.busy_timeout,
        })
    }

    fn vet(&self, mut applied: Applied, caller_sql: bool) -> (Applied, Option<String>) {
        if let Some(reason) = self.guard.take_job_refusal() {
            tracing::warn!(%reason, "spindle: a transaction closure's SQL was refused");
            let refused = format!("a transaction closure's SQL may not do this: {reason}");
            applied = applied.overrule(Error::Forbidden(refused));
        } else if self.guard.take_exhausted() {
            applied = applied.overrule(self.guard.too_many_steps());
        }
        if !caller_sql {
            return (applied, None);
        }
        let problem = self.connection_problem();
        if let Some(changed) = problem.clone().or_else(|| self.new_foreign_key()) {
            tracing::warn!(%changed, "spindle: a transaction closure changed the connection; refused");
            let refused =
                format!("a transaction closure's SQL changed the store's connection: {changed}");
            applied = applied.overrule(Error::Forbidden(refused));
        }
        (applied, problem)
    }

    /// What a caller's SQL changed of the connection that every later batch runs on, if
    /// anything: a setting, an attached database, a temporary object.
    fn connection_problem(&self) -> Option<String> {
        match ConnectionState::read(&self.conn) {
            Ok(state) if state == self.connection => None,
            Ok(state) => Some(format!("{state:?}, expected {:?}", self.connection)),
            Err(error) => Some(format!("its state cannot be read: {error}")),
        }
    }

    /// A foreign key from a caller's table into the store's that the closure just made, if
    /// any: such a key would let the caller's rows block or probe the store's own writes. The
    /// closure's first `Tx::sqlite` brought the schema up to date, so keys that were there
    /// before (another connection's) are not counted.
    fn new_foreign_key(&self) -> Option<String> {
        let mut schema = self.schema.borrow_mut();
        let before = schema.refresh(&self.conn, &self.guard)?;
        let made = schema.made_since(&before)?;
        Some(format!("a foreign key into the store's tables ({made})"))
    }

    /// Puts the connection's settings back after a refused closure (its savepoint, with any
    /// temporary object it made, is rolled back already) and checks that they took.
    fn restore_connection(&mut self) -> Result<()> {
        let now = ConnectionState::read(&self.conn)?;
        self.connection.restore(&self.conn, &now)?;
        match self.connection_problem() {
            None => Ok(()),
            Some(problem) => Err(Error::Poisoned(problem)),
        }
    }

    /// Runs a checkpoint. One that cannot finish (a reader, of this store's own or another
    /// process's, holds a snapshot older than the WAL's end) is tried again once the WAL has
    /// grown further; committed data is safe in the WAL either way. The writer never waits for
    /// a reader here: a truncating checkpoint would wait up to `busy_timeout` for readers to
    /// let go (holding every write back), so it runs with no wait at all, and when readers are
    /// there it copies what it can, passively, instead.
    fn checkpoint(&mut self, mode: CheckpointMode) {
        if self.read_only || !self.wal.enabled {
            return;
        }
        let waits = !matches!(mode, CheckpointMode::PASSIVE);
        if waits {
            let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
        }
        let mut result = self.conn.wal_checkpoint_v2(None::<&str>, mode);
        if waits {
            let _ = self.conn.busy_timeout(self.busy_timeout);
            if result.is_err() {
                result = self.conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE);
            }
        }
        let complete = matches!(result, Ok((log_pages, done_pages)) if log_pages == done_pages);
        match &result {
            Ok((log_pages, done_pages)) => {
                tracing::debug!(waits, log_pages, done_pages, "spindle: WAL checkpoint");
            }
            Err(error) => tracing::debug!(waits, %error, "spindle: WAL checkpoint failed"),
        }
        self.wal.checkpointed(complete);
    }

    fn close(self, poisoned: bool) -> Result<()> {
        let checkpointed = self.final_checkpoint(poisoned);
        // A connection serves the next store only as it was opened (tests, and a closure the
        // guard missed, could have changed it behind the checks).
        let unchanged = !poisoned && self.connection_problem().is_none();
        let closed = if self.spare_at_close && unchanged {
            let kept = Kept { guard: self.guard, schema: self.schema.into_inner() };
            fresh::retire(self.conn, kept)
        } else {
            self.conn.close().map_err(|(_, error)| Error::from(error))
        };
        checkpointed.and(closed)
    }

    fn final_checkpoint(&self, poisoned: bool) -> Result<()> {
        if self.read_only || !self.wal.enabled || poisoned {
            return Ok(());
        }
        match self.conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::TRUNCATE) {
            // Another connection (another process) is using the file: everything committed is
            // safe in the WAL, which that connection, or the next open, checkpoints.
            Err(error) if matches!(Error::from_sqlite_ref(&error), Error::Busy) => Ok(()),
            Err(error) => Err(error.into()),
            Ok(_) => Ok(()),
        }
    }
}
