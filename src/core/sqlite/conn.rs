//! The SQLite engine's connection as the actor owns it, and what it keeps around it: the call
//! guard and the connection settings a caller's SQL must leave alone, WAL checkpoints, the
//! file's identity and presence, spare in-memory connections, and other processes' commits
//! seen through `data_version`. `core::conn` dispatches the actor's steps here.

use std::cell::RefCell;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use super::fresh;
use super::guard::{CallGuard, ConnectionState, SchemaLinks};
use super::identity::FileWatch;
use super::wal::WalSchedule;
use crate::core::msg::Applied;
use crate::core::presence::Presence;
use crate::core::schema::{self, Kept, Location};
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

/// The SQLite engine's connection and what the actor keeps with it.
pub(crate) struct SqliteConn {
    conn: Connection,
    wal: WalSchedule,
    /// Keeps calls from ending or reshaping the batch's transaction.
    guard: std::sync::Arc<CallGuard>,
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

impl SqliteConn {
    /// Opens the file or memory at `location` (read-only, as a reader's, when
    /// `options.read_only`).
    pub(crate) fn open(location: &Location, options: &Options) -> Result<Self> {
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
                let guard = CallGuard::install(&mut conn, &options.limits)?;
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

    /// The connection, for statements.
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// What a `Tx` gets of the engine's own parts.
    pub(crate) fn parts(&self) -> SqliteParts<'_> {
        SqliteParts {
            conn: &self.conn,
            guard: &self.guard,
            schema: &self.schema,
            presence: self.presence.as_ref(),
        }
    }

    /// A digest of what the store holds (the seed of a seeded store's randomness).
    pub(crate) fn content_digest(&self) -> Result<[u8; 32]> {
        schema::content_digest(&self.conn)
    }

    /// Whether a transaction is open (SQLite ends one by itself on some failures).
    pub(crate) fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// Rolls back the open transaction.
    pub(crate) fn rollback(&self) -> Result<()> {
        Ok(self.conn.execute_batch("ROLLBACK")?)
    }

    /// A call starts: the guard learns whose SQL runs.
    pub(crate) fn enter_call(&self, internal: bool, confined: bool) {
        self.guard.enter(internal, confined);
    }

    /// The call has ended.
    pub(crate) fn leave_call(&self) {
        self.guard.leave();
    }

    /// Whether a writing batch may commit: the store's file must still be at its path.
    pub(crate) fn check_before_commit(&self, writes: bool) -> Result<()> {
        match self.file.as_ref().filter(|_| writes) {
            Some(file) => file.check(),
            None => Ok(()),
        }
    }

    /// A batch committed: a write leaves the WAL to checkpoint.
    pub(crate) fn committed(&mut self, writes: bool) {
        self.wal.dirty |= writes;
    }

    /// Whether an idle moment has work to do (a checkpoint).
    pub(crate) fn idle_work(&self) -> bool {
        self.wal.dirty
    }

    /// What an idle moment is for: a passive checkpoint.
    pub(crate) fn idle(&mut self) {
        if self.wal.dirty && self.wal.may_retry() {
            self.checkpoint(CheckpointMode::PASSIVE);
        }
    }

    /// Runs a checkpoint if the WAL has grown past its schedule.
    pub(crate) fn schedule_checkpoint(&mut self) {
        if let Some(mode) = self.wal.due() {
            self.checkpoint(mode);
        }
    }

    /// The connection's `PRAGMA data_version`: it moves whenever another connection commits.
    pub(crate) fn foreign_version(&self) -> Option<i64> {
        self.conn.query_row("PRAGMA data_version", [], |row| row.get(0)).ok()
    }

    /// The verdict on a call that just ran (see `Conn::vet`).
    pub(crate) fn vet(&self, mut applied: Applied, caller_sql: bool) -> (Applied, Option<String>) {
        if let Some(reason) = self.guard.take_call_refusal() {
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
    pub(crate) fn restore_connection(&mut self) -> Result<()> {
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

    /// Checkpoints and closes the connection; a spare in-memory one serves the next store.
    pub(crate) fn close(self, poisoned: bool) -> Result<()> {
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
