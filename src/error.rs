//! The crate's one error type, and the mapping from SQLite's result codes onto it.
//!
//! Outcomes a caller routinely branches on (an empty claim, a busy lease) are values in the
//! operations' outputs, not errors. Everything here means "this call did not do what it asked",
//! and, for every variant but the storage ones, "and it wrote nothing".

use rusqlite::ErrorCode;

/// The result type of every fallible call in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a Spindle call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object does not exist for this tenant (another tenant's object is reported the same).
    #[error("{kind} not found: {id}")]
    NotFound {
        /// What kind of object was looked up ("stream", "queue item", ...).
        kind: &'static str,
        /// The id that was looked up.
        id: String,
    },
    /// The write conflicts with what is stored: an idempotency key reused with other content, a
    /// compare-and-set that lost, a transition the state machine does not allow.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A lease-holder write carried a stale fencing token or arrived after its lease expired.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// An argument has the wrong shape (an empty id, a control character, a bad range).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An argument is larger than its documented limit (see [`Limits`](crate::Limits)).
    #[error("{what} is too large: {actual} exceeds the limit of {limit}")]
    TooLarge {
        /// What was measured ("payload bytes", "page size", ...).
        what: &'static str,
        /// The limit in force.
        limit: u64,
        /// The size that was given.
        actual: u64,
    },
    /// The caller presented no valid credentials.
    #[error("unauthorized")]
    Unauthorized,
    /// The caller's role does not allow this operation.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The tenant is suspended: it can read, but every write is refused.
    #[error("tenant {0} is suspended")]
    TenantSuspended(String),
    /// The database stayed locked by another connection for longer than the busy timeout (on
    /// PostgreSQL also: an op lost a deadlock or a serialisation failure on every try, or a
    /// transaction closure lost one once).
    #[error("database is busy (locked by another connection)")]
    Busy,
    /// The store was opened read-only, or the file cannot be written.
    #[error("database is read-only")]
    ReadOnly,
    /// The disk (or the configured `max_page_count`) is full; the batch was rolled back.
    #[error("database or disk is full")]
    DiskFull,
    /// SQLite found the file damaged.
    #[error("database is corrupt: {0}")]
    Corrupt(String),
    /// The file is not a SQLite database.
    #[error("file is not a database")]
    NotADatabase,
    /// The store's path cannot hold a store, or this user may not use the file there or the
    /// files kept beside it: a directory, a device (anything but a regular file), a missing
    /// directory (or, for a read-only open, a missing file), a file it may not read or write,
    /// a directory it may not make the store's files in, another user's `-wal` or `-shm`, an
    /// open that would leave such files behind for the store's owner, a `<db>-presence` that
    /// is not a regular file of a user who may write the store; or (kind `WouldBlock`)
    /// another store held the presence file past `busy_timeout` while it recovered at open.
    /// What the check before SQLite's open refuses, it refuses before anything is created or
    /// changed. The rest comes later: SQLite's own failure explained (nothing written to the
    /// store), the presence file (after a writable open, which may have made a new store's
    /// file or migrated an older one), and a read-only open that found it had made `-wal` and
    /// `-shm` its owner could not write (removed again where that is safe, see the message).
    /// A backup's destination and a restore's store file are refused with it too: a path that
    /// is taken (`AlreadyExists`), a store that is open (`ResourceBusy`), a file that is not a
    /// store (`InvalidInput`).
    #[error("{message}")]
    StoreFile {
        /// The path as given (or the file beside it that is at fault).
        path: std::path::PathBuf,
        /// What kind of problem: `IsADirectory`, `NotADirectory`, `NotFound` (a missing
        /// directory, or no file for a read-only open), `InvalidInput` (not a regular file, an
        /// empty path), `PermissionDenied`, `WouldBlock` (held off by a store recovering at
        /// open: try again), `AlreadyExists` (a backup's destination is taken),
        /// `ResourceBusy` (a restore's store is open), or another kind the operating system
        /// reported.
        kind: std::io::ErrorKind,
        /// What is wrong, naming the files (and their owners), and what to do.
        message: String,
    },
    /// The file was written by a newer Spindle; it was left untouched.
    #[error("schema version {found} is newer than the supported version {supported}")]
    SchemaTooNew {
        /// The version stored in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The store has been closed (or its thread has exited).
    #[error("store is closed")]
    Closed,
    /// The store could not get back to a clean state after a failure; reopen it.
    #[error("store is poisoned: {0}")]
    Poisoned(String),
    /// An operation panicked; its work was rolled back and the store is still usable.
    #[error("operation {0} panicked")]
    OpPanicked(String),
    /// Any other SQLite error: its result codes and message, with SQLite's binding's own
    /// error as its `source()` (the binding's type is not part of this crate's API).
    #[error("sqlite: {0}")]
    Sqlite(#[source] SqliteError),
    /// The call asked for what only another engine has (`Tx::sqlite` on a PostgreSQL store,
    /// say); it did nothing.
    #[error("this store runs on another engine: {0} is not available")]
    WrongEngine(String),
    /// Any other PostgreSQL error (the `postgres` feature's engine), with its SQLSTATE.
    #[error("postgres: {0}")]
    Postgres(String),
    /// A JSON value could not be encoded or decoded.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An operating-system I/O error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// `NotFound` for the `kind` of object with `id`.
    pub(crate) fn not_found(kind: &'static str, id: &str) -> Self {
        Self::NotFound { kind, id: id.to_owned() }
    }

    /// `Ok` if a statement changed exactly one row; otherwise `Conflict`: the row named
    /// `what id` changed under the operation (its checks had passed a moment before).
    pub(crate) fn expect_one(changed: usize, what: &str, id: &str) -> Result<()> {
        if changed != 1 {
            return Err(Self::Conflict(format!(
                "{what} {id} changed under the operation ({changed} rows updated)"
            )));
        }
        Ok(())
    }

    /// `TooLarge` for `what`, from its limit and its actual size.
    pub(crate) fn too_large(what: &'static str, limit: usize, actual: usize) -> Self {
        Self::TooLarge { what, limit: limit as u64, actual: actual as u64 }
    }

    /// An equal error built afresh: a failure that ends a whole batch is reported to every
    /// operation in it, and errors carrying foreign types are not `Clone`.
    pub(crate) fn replicate(&self) -> Self {
        match self {
            Self::NotFound { kind, id } => Self::NotFound { kind, id: id.clone() },
            Self::Conflict(m) => Self::Conflict(m.clone()),
            Self::LeaseLost(m) => Self::LeaseLost(m.clone()),
            Self::InvalidInput(m) => Self::InvalidInput(m.clone()),
            Self::TooLarge { what, limit, actual } => {
                Self::TooLarge { what, limit: *limit, actual: *actual }
            }
            Self::Unauthorized => Self::Unauthorized,
            Self::Forbidden(m) => Self::Forbidden(m.clone()),
            Self::TenantSuspended(m) => Self::TenantSuspended(m.clone()),
            Self::Busy => Self::Busy,
            Self::ReadOnly => Self::ReadOnly,
            Self::DiskFull => Self::DiskFull,
            Self::Corrupt(m) => Self::Corrupt(m.clone()),
            Self::NotADatabase => Self::NotADatabase,
            Self::StoreFile { path, kind, message } => {
                Self::StoreFile { path: path.clone(), kind: *kind, message: message.clone() }
            }
            Self::SchemaTooNew { found, supported } => {
                Self::SchemaTooNew { found: *found, supported: *supported }
            }
            Self::Closed => Self::Closed,
            Self::Poisoned(m) => Self::Poisoned(m.clone()),
            Self::OpPanicked(m) => Self::OpPanicked(m.clone()),
            Self::Sqlite(e) => Self::from_sqlite_ref(&e.0),
            Self::Postgres(m) => Self::Postgres(m.clone()),
            Self::WrongEngine(m) => Self::WrongEngine(m.clone()),
            Self::Json(e) => Self::Json(<serde_json::Error as serde::de::Error>::custom(e)),
            Self::Io(e) => Self::Io(std::io::Error::new(e.kind(), e.to_string())),
        }
    }

    /// Maps a borrowed SQLite error onto this enum, without consuming it.
    ///
    /// A failed `COMMIT` has to be reported to every operation of its batch, so the mapping
    /// builds a fresh value each time instead of moving the original.
    pub(crate) fn from_sqlite_ref(error: &rusqlite::Error) -> Self {
        let rusqlite::Error::SqliteFailure(code, message) = error else {
            let text = error.to_string();
            return Self::Sqlite(SqliteError(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                Some(text),
            )));
        };
        match code.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Self::Busy,
            ErrorCode::ReadOnly => Self::ReadOnly,
            ErrorCode::DiskFull => Self::DiskFull,
            ErrorCode::NotADatabase => Self::NotADatabase,
            // Only a caller's own SQL is ever refused (see `core::sqlite::guard`).
            ErrorCode::AuthorizationForStatementDenied => Self::Forbidden(format!(
                "a transaction closure's SQL may not do this: {}",
                message.clone().unwrap_or_else(|| code.to_string())
            )),
            ErrorCode::DatabaseCorrupt => {
                SQLITE_FOUND_CORRUPTION.with(|found| found.set(true));
                Self::Corrupt(message.clone().unwrap_or_else(|| code.to_string()))
            }
            _ => Self::Sqlite(SqliteError(rusqlite::Error::SqliteFailure(*code, message.clone()))),
        }
    }
}

thread_local! {
    /// Set when an error SQLite itself reported as corruption was mapped on this thread (an
    /// `Error::Corrupt` a caller or a row decoder makes does not set it): the actor reads it
    /// after each call to refuse writes to a damaged file.
    static SQLITE_FOUND_CORRUPTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether SQLite reported corruption on this thread since the last call (and forgets it).
pub(crate) fn take_sqlite_corruption() -> bool {
    SQLITE_FOUND_CORRUPTION.with(|found| found.replace(false))
}

impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        match &error {
            rusqlite::Error::SqliteFailure(..) => Self::from_sqlite_ref(&error),
            rusqlite::Error::SqlInputError { error: failure, msg, .. }
                if failure.code == ErrorCode::AuthorizationForStatementDenied =>
            {
                Self::Forbidden(format!("a transaction closure's SQL may not do this: {msg}"))
            }
            _ => Self::Sqlite(SqliteError(error)),
        }
    }
}

/// An error SQLite reported that no other variant of [`Error`] names: its result codes and
/// its message. SQLite's binding's own error is its `source()`.
#[derive(Debug)]
pub struct SqliteError(pub(crate) rusqlite::Error);

impl SqliteError {
    /// SQLite's primary result code (`SQLITE_CANTOPEN` is 14, see
    /// <https://sqlite.org/rescode.html>), when SQLite itself failed; `None` for an error of
    /// the binding (a value of the wrong type, say).
    pub fn code(&self) -> Option<i32> {
        self.extended_code().map(|code| code & 0xff)
    }

    /// SQLite's extended result code (`SQLITE_IOERR_FSYNC` is 1034), when SQLite itself failed.
    pub fn extended_code(&self) -> Option<i32> {
        match &self.0 {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
            rusqlite::Error::SqlInputError { error, .. } => Some(error.extended_code),
            _ => None,
        }
    }
}

impl std::fmt::Display for SqliteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SqliteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some("m".into()))
    }

    #[test]
    fn sqlite_codes_map_to_typed_variants() {
        use rusqlite::ffi;
        assert!(matches!(Error::from(failure(ffi::SQLITE_BUSY)), Error::Busy));
        assert!(matches!(Error::from(failure(ffi::SQLITE_LOCKED)), Error::Busy));
        assert!(matches!(Error::from(failure(ffi::SQLITE_READONLY)), Error::ReadOnly));
        assert!(matches!(Error::from(failure(ffi::SQLITE_FULL)), Error::DiskFull));
        assert!(matches!(Error::from(failure(ffi::SQLITE_NOTADB)), Error::NotADatabase));
        assert!(matches!(Error::from(failure(ffi::SQLITE_CORRUPT)), Error::Corrupt(m) if m == "m"));
        assert!(matches!(Error::from(failure(ffi::SQLITE_MISUSE)), Error::Sqlite(_)));
    }

    #[test]
    fn mapping_by_reference_copies_the_message() {
        let original = failure(rusqlite::ffi::SQLITE_CONSTRAINT);
        let Error::Sqlite(error) = Error::from_sqlite_ref(&original) else {
            panic!("expected a plain sqlite error");
        };
        let SqliteError(rusqlite::Error::SqliteFailure(code, message)) = &error else {
            panic!("expected SQLite's failure");
        };
        assert_eq!(code.code, ErrorCode::ConstraintViolation);
        assert_eq!(message.as_deref(), Some("m"));
        assert_eq!(error.code(), Some(rusqlite::ffi::SQLITE_CONSTRAINT));
        assert!(std::error::Error::source(&error).is_some(), "the binding's error");
    }
}
