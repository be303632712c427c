//! Opening the connection: flags, pragmas (set, then read back), the SQLite version, and the
//! schema (initialise an empty file, migrate an older one forward, refuse a newer one).
//!
//! Runs on the actor thread, before the actor takes its first message; `Store::open` reports
//! whatever fails here.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use sha2::{Digest, Sha256};

use crate::core::sqlite::fresh;
use crate::core::sqlite::guard::{CallGuard, SchemaLinks};
use crate::core::sqlite::{left_behind, store_file};
use crate::error::{Error, Result};
use crate::options::{Durability, Options};

/// The schema version `schema.sql` creates; stored in `PRAGMA user_version`.
pub(crate) const SCHEMA_VERSION: i64 = 7;

/// Identifies a Spindle file (`PRAGMA application_id`, the bytes 'SPND').
pub(crate) const APPLICATION_ID: i64 = 0x5350_4E44;

/// The whole current schema, applied to an empty file.
pub(crate) const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// Forward migrations: `MIGRATIONS[i]` takes a store from version `i + 1` to `i + 2`.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0002_graphs_and_tokens.sql"),
    include_str!("../../migrations/0003_processes_and_workflows.sql"),
    include_str!("../../migrations/0004_queue_settings_and_checks.sql"),
    include_str!("../../migrations/0005_counts.sql"),
    include_str!("../../migrations/0006_queue_controls.sql"),
    include_str!("../../migrations/0007_queue_schedules.sql"),
];

const _: () = assert!(MIGRATIONS.len() as i64 + 1 == SCHEMA_VERSION);

/// The oldest SQLite this crate runs on: 3.35 brought `RETURNING`.
const SQLITE_VERSION_MIN: i32 = 3_035_000;

/// Prepared statements kept by the connection: every statement of every domain, with room.
const STATEMENT_CACHE_CAPACITY: usize = 256;

/// Where the database lives.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    /// A file on disk.
    File(std::path::PathBuf),
    /// A private in-memory database.
    Memory,
    /// A PostgreSQL database (its connection URL).
    #[cfg(feature = "postgres")]
    Postgres(String),
}

/// An open connection, and what a spare connection keeps of the store that used it (see
/// `fresh`).
pub(crate) struct Opened {
    pub(crate) conn: Connection,
    pub(crate) kept: Option<Kept>,
}

/// What a spare connection keeps: the guard whose hooks stay installed on it (installing them
/// again would make SQLite prepare every cached statement again), and the schema the guard's
/// checks know (a fresh store's).
pub(crate) struct Kept {
    pub(crate) guard: Arc<CallGuard>,
    pub(crate) schema: SchemaLinks,
}

/// Opens, configures and prepares the connection the actor will own. A store file's path is
/// looked at first, and SQLite's failure to open or write it explained by the files where they
/// explain it (see `store_file`); a VFS of the caller's own need not keep its files in the
/// operating system's, so its paths are left to it.
pub(crate) fn open(location: &Location, options: &Options) -> Result<Opened> {
    check_sqlite_version(rusqlite::version_number())?;
    match (location, options.vfs.as_deref()) {
        (Location::File(path), None) => open_file(path, location, options),
        _ => open_checked(location, options),
    }
}

/// [`open`] of a store file on SQLite's own VFS: the path checked first, a read-only open by
/// another user refused if it left files the owner could not write (see `left_behind`: the
/// connection is closed before they are removed), and a writable one's writes probed.
fn open_file(path: &Path, location: &Location, options: &Options) -> Result<Opened> {
    store_file::check_before_open(path, options.read_only)?;
    let opened = open_checked(location, options);
    if options.read_only
        && let Some(left) = left_behind::left_by_reading(path)
    {
        drop(opened);
        return Err(left.refuse());
    }
    let opened = opened.map_err(|error| store_file::explain(path, options.read_only, error))?;
    if !options.read_only {
        probe_writes(&opened.conn).map_err(|error| store_file::explain(path, false, error))?;
    }
    Ok(opened)
}

/// A writable store whose file SQLite could open only to read (it falls back to reading
/// silently), or whose `-wal` or `-shm` it could (found when taking the write lock, which is let
/// go at once), fails here, at open, where it can be explained, rather than at its first write.
/// Another writer holding the lock is no failure.
fn probe_writes(conn: &Connection) -> Result<()> {
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        return Err(Error::ReadOnly);
    }
    match conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK") {
        Ok(()) => Ok(()),
        Err(error) => {
            if !conn.is_autocommit() {
                conn.execute_batch("ROLLBACK")?;
            }
            match Error::from(error) {
                Error::Busy => Ok(()),
                other => Err(other),
            }
        }
    }
}

fn open_checked(location: &Location, options: &Options) -> Result<Opened> {
    let Opened { mut conn, kept } = match location {
        // A writable in-memory store on SQLite's own VFS starts as a copy of a fresh one, or
        // on a spare connection.
        Location::Memory if !options.read_only && options.vfs.is_none() => {
            fresh::memory_connection()?
        }
        _ => Opened { conn: open_connection(location, options)?, kept: None },
    };
    conn.busy_timeout(options.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    // Plans must not depend on bound values: otherwise SQLite re-prepares a cached statement
    // whenever a parameter compared against a partial index's condition (or a range bound)
    // changes, which cost a claim three re-prepares, about 150 µs.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // Read the version before anything can write to the file, so a newer (or foreign) file is
    // left exactly as it was.
    let found = user_version(&conn)?;
    refuse_newer(found)?;
    check_identity(&conn, found)?;
    configure(&conn, location, options)?;
    prepare_schema(&mut conn, found, options.read_only)?;
    Ok(Opened { conn, kept })
}

fn open_connection(location: &Location, options: &Options) -> Result<Connection> {
    let mode = if options.read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    };
    // No URI flag, and a relative path starting with `file:` handed over as `./file:...`: a
    // path is a path, whatever it looks like (the bundled SQLite reads URIs without the flag).
    let flags = mode | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match (location, options.vfs.as_deref()) {
        (Location::File(path), None) => {
            Connection::open_with_flags(store_file::sqlite_name(path), flags)?
        }
        (Location::File(path), Some(vfs)) => {
            Connection::open_with_flags_and_vfs(store_file::sqlite_name(path), flags, vfs)?
        }
        (Location::Memory, None) => Connection::open_in_memory_with_flags(flags)?,
        (Location::Memory, Some(vfs)) => Connection::open_in_memory_with_flags_and_vfs(flags, vfs)?,
        #[cfg(feature = "postgres")]
        (Location::Postgres(_), _) => {
            return Err(Error::InvalidInput("a PostgreSQL store has no SQLite file".into()));
        }
    };
    Ok(conn)
}

/// What a store holds, digested: every row of every table, the autoincrement counters
/// included. A seeded file store folds it into its seed at open, so that a reopened store's ids
/// do not repeat those of an earlier session (its id stream would otherwise start over). A
/// read of the whole file: fine for the tests and harnesses that seed a store.
pub(crate) fn content_digest(conn: &Connection) -> Result<[u8; 32]> {
    let mut statement =
        conn.prepare("SELECT name FROM main.sqlite_schema WHERE type = 'table' ORDER BY name")?;
    let tables = statement.query_map([], |row| row.get::<_, String>(0))?;
    let mut hasher = Sha256::new();
    for table in tables {
        let table = table?;
        hasher.update(table.as_bytes());
        // A caller's own table is listed too: its name is quoted, never trusted.
        let mut rows = conn.prepare(&format!("SELECT * FROM main.{}", quoted(&table)))?;
        let columns = rows.column_count();
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            for column in 0..columns {
                digest_value(&mut hasher, row.get_ref(column)?);
            }
        }
    }
    Ok(hasher.finalize().into())
}

/// `name` as an SQL identifier: in double quotes, any double quote in it doubled.
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Adds one value to a digest of rows: its storage class (text and blobs apart), then its
/// bytes (a text or blob's length first), so that no two different rows hash alike.
pub(crate) fn digest_value(hasher: &mut Sha256, value: ValueRef<'_>) {
    match value {
        ValueRef::Null => hasher.update([0]),
        ValueRef::Integer(number) => {
            hasher.update([1]);
            hasher.update(number.to_le_bytes());
        }
        ValueRef::Real(number) => {
            hasher.update([2]);
            hasher.update(number.to_le_bytes());
        }
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            hasher.update([if matches!(value, ValueRef::Text(_)) { 3 } else { 4 }]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
    }
}

/// The schema version of the Spindle store `conn` holds (a backup's, a file about to be put in a
/// store's place): one this build opens, migrating it forward if it is older.
///
/// # Errors
/// `SchemaTooNew` for a newer store; `InvalidInput` for a database without a store's version
/// or application id (another application's, or an empty one); SQLite's own error for a file
/// that is not a database.
pub(crate) fn check_is_store(conn: &Connection) -> Result<i64> {
    let found = user_version(conn)?;
    refuse_newer(found)?;
    if found == 0 {
        return Err(Error::InvalidInput(
            "the file holds no store: it has no Spindle schema version".into(),
        ));
    }
    check_application_id(conn)?;
    Ok(found)
}

fn check_sqlite_version(version: i32) -> Result<()> {
    if version < SQLITE_VERSION_MIN {
        return Err(Error::InvalidInput(format!(
            "SQLite {version} is older than the required {SQLITE_VERSION_MIN}"
        )));
    }
    Ok(())
}

/// Refuses a file that is not a Spindle store, before anything (even the journal mode) changes
/// in it: an unversioned file must be empty, a versioned one must carry Spindle's id.
fn check_identity(conn: &Connection, found: i64) -> Result<()> {
    if found == 0 { check_empty(conn) } else { check_application_id(conn) }
}

fn refuse_newer(found: i64) -> Result<()> {
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    Ok(())
}

/// Sets every pragma the store relies on and reads each back; a pragma that did not take is an
/// error, not a silently weaker store.
fn configure(conn: &Connection, location: &Location, options: &Options) -> Result<()> {
    if let (Location::File(_), false) = (location, options.read_only) {
        set_wal(conn, options.busy_timeout)?;
        expect_pragma(conn, "journal_mode", "wal")?;
    }
    let synchronous = match options.durability {
        Durability::Full => "2",
        Durability::Normal => "1",
    };
    set_pragma(conn, "synchronous", synchronous)?;
    set_pragma(conn, "foreign_keys", "1")?;
    set_pragma(conn, "temp_store", "2")?;
    // The actor schedules checkpoints itself (see actor.rs).
    set_pragma(conn, "wal_autocheckpoint", "0")?;
    if let Some(bytes) = options.file_bytes_max {
        cap_file(conn, bytes)?;
    }
    expect_pragma(conn, "busy_timeout", &options.busy_timeout.as_millis().to_string())
}

/// Caps the file at `bytes` (whole pages, at least one; SQLite keeps a file already larger at
/// its current size).
fn cap_file(conn: &Connection, bytes: u64) -> Result<()> {
    let page_bytes: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
    let pages = bytes / u64::try_from(page_bytes.max(1)).unwrap_or(1);
    let pages = i64::try_from(pages.max(1)).unwrap_or(i64::MAX);
    conn.pragma_update(None, "max_page_count", pages)?;
    Ok(())
}

/// Switches to WAL. SQLite does not call the busy handler for this pragma, so a lock held by
/// another process is retried here, with backoff, up to the busy timeout.
fn set_wal(conn: &Connection, busy_timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + busy_timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => return Ok(()),
            Err(error) => {
                let mapped = Error::from(error);
                if !matches!(mapped, Error::Busy) || Instant::now() >= deadline {
                    return Err(mapped);
                }
            }
        }
        tracing::debug!(pause_ms = pause.as_millis(), "spindle: WAL mode held off; retried");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Sets a pragma, unless it already has that value (setting a flag such as `foreign_keys`
/// makes SQLite prepare every cached statement again), and reads it back.
fn set_pragma(conn: &Connection, name: &str, value: &str) -> Result<()> {
    if !read_pragma(conn, name)?.eq_ignore_ascii_case(value) {
        conn.pragma_update(None, name, value)?;
    }
    expect_pragma(conn, name, value)
}

fn expect_pragma(conn: &Connection, name: &str, expected: &str) -> Result<()> {
    let actual = read_pragma(conn, name)?;
    if !actual.eq_ignore_ascii_case(expected) {
        return Err(Error::InvalidInput(format!(
            "PRAGMA {name} is {actual} after setting it to {expected}"
        )));
    }
    Ok(())
}

/// A pragma's value as text, whatever type SQLite reports it in.
pub(crate) fn read_pragma(conn: &Connection, name: &str) -> Result<String> {
    let value: Value = conn.pragma_query_value(None, name, |row| row.get(0))?;
    Ok(match value {
        Value::Integer(number) => number.to_string(),
        Value::Text(text) => text,
        Value::Real(number) => number.to_string(),
        Value::Null | Value::Blob(_) => String::new(),
    })
}

fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
}

/// Brings the schema to `SCHEMA_VERSION`: nothing to do, initialise, or migrate forward.
fn prepare_schema(conn: &mut Connection, found: i64, read_only: bool) -> Result<()> {
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if read_only {
        return Err(Error::InvalidInput(format!(
            "schema version {found} needs an upgrade to {SCHEMA_VERSION}; open it read-write once"
        )));
    }
    upgrade(conn, MIGRATIONS)
}

/// Initialises or migrates under the write lock, re-reading the version there: another
/// process may have done it first.
fn upgrade(conn: &mut Connection, steps: &[&str]) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    refuse_newer(found)?;
    if found == 0 {
        initialise(&tx)?;
    } else {
        check_application_id(&tx)?;
        migrate(&tx, found, steps)?;
    }
    tx.commit()?;
    Ok(())
}

/// Creates the current schema in an empty database.
pub(crate) fn create(conn: &mut Connection) -> Result<()> {
    upgrade(conn, MIGRATIONS)
}

fn initialise(conn: &Connection) -> Result<()> {
    check_empty(conn)?;
    conn.execute_batch(SCHEMA_SQL)?;
    Ok(())
}

fn check_empty(conn: &Connection) -> Result<()> {
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    if tables > 0 {
        return Err(Error::InvalidInput(
            "the file holds another application's tables, not a Spindle store".into(),
        ));
    }
    Ok(())
}

/// Runs the steps from `found` to the newest, then records the new version. The caller's
/// transaction makes it all-or-nothing.
fn migrate(conn: &Connection, found: i64, steps: &[&str]) -> Result<()> {
    let first = usize::try_from(found - 1).unwrap_or(usize::MAX);
    for step in steps.iter().skip(first) {
        conn.execute_batch(step)?;
    }
    let target = steps.len() as i64 + 1;
    conn.pragma_update(None, "user_version", target)?;
    Ok(())
}

fn check_application_id(conn: &Connection) -> Result<()> {
    let id: i64 = conn.pragma_query_value(None, "application_id", |row| row.get(0))?;
    if id != APPLICATION_ID {
        return Err(Error::InvalidInput(format!(
            "application_id {id:#x} is not Spindle's; this is not a Spindle store"
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn memory() -> Connection {
        Connection::open_in_memory().expect("in-memory database")
    }

    /// A Spindle file at version 1 holding one table, `t`.
    fn store_at_version_one() -> Result<Connection> {
        let conn = memory();
        conn.execute_batch(
            "CREATE TABLE t (a INTEGER); PRAGMA user_version = 1;
             PRAGMA application_id = 1397771844;",
        )?;
        Ok(conn)
    }

    #[test]
    fn fresh_schema_has_the_current_version_and_application_id() -> Result<()> {
        let mut conn = memory();
        upgrade(&mut conn, MIGRATIONS)?;
        assert_eq!(user_version(&conn)?, SCHEMA_VERSION);
        check_application_id(&conn)
    }

    /// Every table, index and trigger, by name, with its SQL.
    pub(crate) fn schema_of(conn: &Connection) -> Result<Vec<(String, String)>> {
        let mut statement = conn.prepare(
            "SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name",
        )?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    #[test]
    fn a_migrated_version_one_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v1.sql"))
    }

    #[test]
    fn a_migrated_version_two_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v2.sql"))
    }

    #[test]
    fn a_migrated_version_three_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v3.sql"))
    }

    #[test]
    fn a_migrated_version_four_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v4.sql"))
    }

    #[test]
    fn a_migrated_version_five_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v5.sql"))
    }

    #[test]
    fn a_migrated_version_six_store_has_the_fresh_schema() -> Result<()> {
        assert_migrates_to_fresh(include_str!("../../tests/fixtures/schema_v6.sql"))
    }

    #[test]
    fn the_migration_to_version_six_keeps_every_queue_setting_unpaused_and_unlimited() -> Result<()>
    {
        let mut conn = memory();
        conn.execute_batch(include_str!("../../tests/fixtures/schema_v5.sql"))?;
        conn.execute(
            "INSERT INTO main.queue_settings (tenant_id, queue, item_events, updated_at_ms)
             VALUES ('default', 'quiet', 0, 7), ('acme', 'loud', 1, 8)",
            [],
        )?;
        upgrade(&mut conn, MIGRATIONS)?;
        let kept: Vec<(String, String, i64, i64, i64, Option<i64>)> = conn
            .prepare(
                "SELECT tenant_id, queue, item_events, updated_at_ms, paused, concurrency_max
                 FROM main.queue_settings ORDER BY tenant_id",
            )?
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let expected = [
            ("acme".to_owned(), "loud".to_owned(), 1, 8, 0, None),
            ("default".to_owned(), "quiet".to_owned(), 0, 7, 0, None),
        ];
        assert_eq!(kept, expected);
        for bad in [
            "UPDATE main.queue_settings SET paused = 2",
            "UPDATE main.queue_settings SET concurrency_max = 0",
        ] {
            assert!(conn.execute(bad, []).is_err(), "{bad}: the checks hold");
        }
        Ok(())
    }

    #[test]
    fn the_migration_to_version_four_keeps_every_queue_item_as_it_was() -> Result<()> {
        let mut conn = memory();
        conn.execute_batch(include_str!("../../tests/fixtures/schema_v3.sql"))?;
        conn.execute(
            "INSERT INTO main.queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms,
                 attempt, max_attempts, backoff_base_ms, backoff_max_ms, status, fence, worker_id,
                 lease_expires_at_ms, created_at_ms, updated_at_ms)
             VALUES ('default', 'i', 'q', '{}', 5, 10, 2, 3, 1000, 64000, 'claimed', 7, 'w', 99,
                     1, 2)",
            [],
        )?;
        upgrade(&mut conn, MIGRATIONS)?;
        let kept: (String, i64, i64, i64, String) = conn.query_row(
            "SELECT status, fence, attempt, lease_expires_at_ms, worker_id FROM main.queue_items
             WHERE tenant_id = 'default' AND item_id = 'i'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
        assert_eq!(kept, ("claimed".to_owned(), 7, 2, 99, "w".to_owned()));
        let due: i64 = conn.query_row(
            "SELECT count(*) FROM main.queue_items INDEXED BY queue_items_leases
             WHERE tenant_id = 'default' AND queue = 'q' AND status = 'claimed'",
            [],
            |r| r.get(0),
        )?;
        assert_eq!(due, 1, "the partial indexes hold the copied rows");
        let bad = conn.execute("UPDATE main.queue_items SET status = 'lost'", []);
        assert!(bad.is_err(), "the status check still refuses an unknown status");
        Ok(())
    }

    #[test]
    fn the_migration_to_version_four_keeps_the_events_and_their_position_counter() -> Result<()> {
        let mut conn = memory();
        conn.execute_batch(include_str!("../../tests/fixtures/schema_v3.sql"))?;
        for seq in 1..=3 {
            conn.execute(
                "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type,
                     payload, created_at_ms) VALUES ('default', 'custom', 's', ?1, 't', '{}', 0)",
                [seq],
            )?;
        }
        // The newest event is gone (truncated or pruned): its position must not come back.
        conn.execute("DELETE FROM main.events WHERE position = 3", [])?;
        upgrade(&mut conn, MIGRATIONS)?;
        let kept: Vec<(i64, i64)> = conn
            .prepare("SELECT position, seq FROM main.events ORDER BY position")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        assert_eq!(kept, [(1, 1), (2, 2)]);
        conn.execute(
            "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                 created_at_ms) VALUES ('default', 'custom', 's', 4, 't', '{}', 0)",
            [],
        )?;
        assert_eq!(conn.last_insert_rowid(), 4, "positions go on past the highest ever");
        let bad = conn.execute("UPDATE main.events SET stream_kind = 'other'", []);
        assert!(bad.is_err(), "the kind check still refuses an unknown kind");
        Ok(())
    }

    #[test]
    fn writing_an_event_or_a_queue_item_builds_no_temporary_index() -> Result<()> {
        let mut conn = memory();
        upgrade(&mut conn, MIGRATIONS)?;
        let writes = [
            "UPDATE main.queue_items SET status = 'completed'
             WHERE tenant_id = 'default' AND item_id = 'i' AND status = 'claimed'",
            "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                 created_at_ms) VALUES ('default', 'custom', 's', 1, 't', '{}', 0)",
        ];
        for write in writes {
            let program: Vec<String> = conn
                .prepare(&format!("EXPLAIN {write}"))?
                .query_map([], |r| r.get::<_, String>(1))?
                .collect::<rusqlite::Result<_>>()?;
            assert!(program.iter().all(|op| op != "OpenEphemeral"), "{write}: {program:?}");
        }
        Ok(())
    }

    /// Migrates a store made by an older `schema.sql` and compares it with a fresh one.
    fn assert_migrates_to_fresh(old_schema: &str) -> Result<()> {
        let mut migrated = memory();
        migrated.execute_batch(old_schema)?;
        migrated.execute("INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq, event_type,
                          payload, created_at_ms) VALUES ('default', 'custom', 's', 1, 't', '{}', 0)", [])?;
        upgrade(&mut migrated, MIGRATIONS)?;
        let mut fresh = memory();
        upgrade(&mut fresh, MIGRATIONS)?;
        assert_eq!(user_version(&migrated)?, SCHEMA_VERSION);
        assert_eq!(schema_of(&migrated)?, schema_of(&fresh)?);
        let kept: i64 =
            migrated.query_row("SELECT count(*) FROM main.events", [], |row| row.get(0))?;
        assert_eq!(kept, 1, "the migration keeps the data");
        Ok(())
    }

    #[test]
    fn migration_runs_every_missing_step_and_sets_the_version() -> Result<()> {
        let mut conn = store_at_version_one()?;
        let steps = ["ALTER TABLE t ADD COLUMN b INTEGER", "CREATE TABLE u (c TEXT)"];
        upgrade(&mut conn, &steps)?;
        assert_eq!(user_version(&conn)?, 3);
        conn.execute("INSERT INTO t (a, b) VALUES (1, 2)", [])?;
        conn.execute("INSERT INTO u (c) VALUES ('x')", [])?;
        Ok(())
    }

    #[test]
    fn a_failing_step_rolls_back_every_step() -> Result<()> {
        let mut conn = store_at_version_one()?;
        let steps = ["CREATE TABLE u (c TEXT)", "THIS IS NOT SQL"];
        assert!(upgrade(&mut conn, &steps).is_err());
        assert_eq!(user_version(&conn)?, 1);
        let tables: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'u'", [], |r| {
                r.get(0)
            })?;
        assert_eq!(tables, 0);
        Ok(())
    }

    #[test]
    fn a_foreign_database_is_not_initialised() -> Result<()> {
        let mut conn = memory();
        conn.execute_batch("CREATE TABLE theirs (x INTEGER)")?;
        assert!(matches!(upgrade(&mut conn, MIGRATIONS), Err(Error::InvalidInput(_))));
        assert_eq!(user_version(&conn)?, 0);
        Ok(())
    }

    #[test]
    fn a_pragma_that_does_not_take_fails_the_open() {
        // An in-memory database cannot be switched to WAL: the read-back catches it.
        let conn = memory();
        let refused = set_pragma(&conn, "journal_mode", "wal");
        assert!(
            matches!(refused, Err(Error::InvalidInput(message)) if message.contains("journal_mode"))
        );
        assert!(set_pragma(&conn, "foreign_keys", "1").is_ok());
    }

    #[test]
    fn a_quoted_name_stays_one_identifier() -> Result<()> {
        let conn = memory();
        let name = "odd\" name; DROP TABLE x; --";
        conn.execute_batch(&format!("CREATE TABLE {} (v INTEGER)", quoted(name)))?;
        let found: String = conn.query_row("SELECT name FROM sqlite_schema", [], |r| r.get(0))?;
        assert_eq!(found, name);
        Ok(())
    }

    #[test]
    fn old_sqlite_is_refused() {
        assert!(check_sqlite_version(3_034_999).is_err());
        assert!(check_sqlite_version(rusqlite::version_number()).is_ok());
    }
}
