//! Fresh in-memory stores, fast: what lets a fuzz harness open a store per input.
//!
//! Running `schema.sql` costs about 2 ms, and a new connection then parses the schema and
//! prepares every statement again (another half millisecond for a few dozen operations). So:
//!
//! - the first in-memory store of a process builds a fresh store's database once and keeps its
//!   image; a new connection starts as a copy of it (SQLite's deserialize), not by running the
//!   schema;
//! - a closing in-memory store gives its connection back, wiped to a fresh store's content
//!   (every row of every table deleted, the autoincrement counters reset, the rows a fresh store
//!   holds put back), with its parsed
//!   schema and prepared statements. The next in-memory store takes it. A connection is wiped
//!   only when its schema is exactly the fresh one (a caller's own table, even dropped again,
//!   changes the schema's version, and such a connection is closed instead); its settings are
//!   set and read back by the next open as for any connection.
//!
//! File stores are untouched: they initialise under the file's own locks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use parking_lot::Mutex;
use rusqlite::types::Value;
use rusqlite::{Connection, MAIN_DB, OpenFlags};

use crate::core::schema::{self, Kept, Opened, quoted};
use crate::core::sqlite::guard;
use crate::error::Result;

/// Most spare connections kept (one per thread that opens in-memory stores is plenty).
const SPARES_MAX: usize = 4;

/// Connections of closed in-memory stores, wiped, with what they keep, waiting for the next
/// in-memory store.
static SPARES: Mutex<Vec<Opened>> = Mutex::new(Vec::new());

/// A connection holding a fresh in-memory store: a spare, or a new copy of the fresh image.
pub(crate) fn memory_connection() -> Result<Opened> {
    if let Some(spare) = SPARES.lock().pop() {
        return Ok(spare);
    }
    let image = Image::get()?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_in_memory_with_flags(flags)?;
    conn.deserialize_read_exact(MAIN_DB, image.bytes.as_slice(), image.bytes.len(), false)?;
    Ok(Opened { conn, kept: None })
}

/// Closes a writable in-memory store's connection: wiped, it is kept as a spare (with its
/// guard, whose hooks stay installed and idle between calls) when there is room; a connection
/// that cannot be wiped exactly is closed.
///
/// # Errors
/// Closing's error, for a connection that is closed.
pub(crate) fn retire(conn: Connection, kept: Kept) -> Result<()> {
    if matches!(wipe(&conn), Ok(true)) {
        let mut spares = SPARES.lock();
        if spares.len() < SPARES_MAX {
            spares.push(Opened { conn, kept: Some(kept) });
            #[cfg(test)]
            tests::KEPT_HERE.with(|kept| kept.set(kept.get() + 1));
            return Ok(());
        }
    }
    conn.close().map_err(|(_, error)| error.into())
}

/// A fresh store's database, made once per process.
struct Image {
    bytes: Vec<u8>,
    /// `PRAGMA schema_version` of a fresh store.
    schema_version: i64,
    /// `PRAGMA page_count` of a fresh store.
    page_count: i64,
    /// Every table of a fresh store with the rows it holds, each before the tables its foreign
    /// keys point to (so deleting in this order breaks no key, and inserting backwards neither).
    tables: Vec<(String, Vec<Row>)>,
}

/// One row's values, in column order.
type Row = Vec<Value>;

static IMAGE: OnceLock<Image> = OnceLock::new();

impl Image {
    fn get() -> Result<&'static Image> {
        if let Some(image) = IMAGE.get() {
            return Ok(image);
        }
        let image = Self::make()?;
        // Another thread may have made it first: the images are the same.
        Ok(IMAGE.get_or_init(|| image))
    }

    fn make() -> Result<Image> {
        let mut conn = Connection::open_in_memory()?;
        schema::create(&mut conn)?;
        let schema_version = guard::schema_version(&conn)?;
        let page_count = pragma(&conn, "page_count")?;
        let tables = children_first(&conn)?
            .into_iter()
            .map(|name| {
                let rows = rows_of(&conn, &name)?;
                Ok((name, rows))
            })
            .collect::<Result<_>>()?;
        let bytes = conn.serialize(MAIN_DB)?.to_vec();
        Ok(Image { bytes, schema_version, page_count, tables })
    }
}

/// Puts a fresh store's rows back in a connection whose schema and size are a fresh store's;
/// whether it did. One that grew is not kept: deleting rows does not shrink a database, and
/// its size would show (to `file_bytes_max`, to a caller's `PRAGMA page_count`). The guard is
/// idle between calls, so these statements are the store's own.
fn wipe(conn: &Connection) -> Result<bool> {
    let image = Image::get()?;
    let fresh_shape = guard::schema_version(conn)? == image.schema_version
        && pragma(conn, "page_count")? == image.page_count;
    if !conn.is_autocommit() || !fresh_shape {
        return Ok(false);
    }
    conn.execute_batch("BEGIN")?;
    let deleted = delete_rows(conn, &image.tables);
    let ended = if deleted.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(ended)?;
    deleted?;
    Ok(true)
}

/// Deletes every row of `tables` and puts back the rows a fresh store holds. Only the tables
/// that hold rows are emptied (one statement finds them: a `DELETE` per table was most of what
/// closing cost).
fn delete_rows(conn: &Connection, tables: &[(String, Vec<Row>)]) -> Result<()> {
    let held = tables_holding_rows(conn, tables)?;
    for ((table, _), held) in tables.iter().zip(held) {
        if held {
            conn.prepare_cached(&format!("DELETE FROM main.{}", quoted(table)))?.execute([])?;
        }
    }
    for (table, rows) in tables.iter().rev() {
        for row in rows {
            let marks = vec!["?"; row.len()].join(", ");
            let sql = format!("INSERT INTO main.{} VALUES ({marks})", quoted(table));
            conn.prepare_cached(&sql)?.execute(rusqlite::params_from_iter(row))?;
        }
    }
    Ok(())
}

/// For each of `tables`, whether it holds a row.
fn tables_holding_rows(conn: &Connection, tables: &[(String, Vec<Row>)]) -> Result<Vec<bool>> {
    let probes: Vec<String> = tables
        .iter()
        .map(|(table, _)| format!("EXISTS (SELECT 1 FROM main.{})", quoted(table)))
        .collect();
    let sql = format!("SELECT {}", probes.join(", "));
    let mut statement = conn.prepare_cached(&sql)?;
    let held = statement.query_row([], |row| (0..tables.len()).map(|i| row.get(i)).collect())?;
    Ok(held)
}

/// The tables of the schema, each before the tables its foreign keys point to.
fn children_first(conn: &Connection) -> Result<Vec<String>> {
    let mut statement = conn.prepare(
        "SELECT m.name, f.\"table\" FROM main.sqlite_schema AS m
         LEFT JOIN pragma_foreign_key_list(m.name) AS f WHERE m.type = 'table' ORDER BY m.name",
    )?;
    let pairs = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let mut parents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pair in pairs {
        let (table, parent): (String, Option<String>) = pair?;
        let entry = parents.entry(table.clone()).or_default();
        entry.extend(parent.filter(|parent| *parent != table));
    }
    let mut ordered = Vec::new();
    while !parents.is_empty() {
        // A table no remaining table points to (with a cycle, the rest in name order: deleting
        // then fails and the connection is closed instead of kept).
        let unreferenced = parents.keys().find(|t| !parents.values().any(|p| p.contains(*t)));
        let next = unreferenced.or_else(|| parents.keys().next()).cloned();
        let Some(next) = next else { break };
        parents.remove(&next);
        ordered.push(next);
    }
    Ok(ordered)
}

/// Every row of `table`, in rowid (or key) order.
fn rows_of(conn: &Connection, table: &str) -> Result<Vec<Row>> {
    let mut statement = conn.prepare(&format!("SELECT * FROM main.{}", quoted(table)))?;
    let columns = statement.column_count();
    let rows = statement.query_map([], |row| (0..columns).map(|i| row.get(i)).collect())?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn pragma(conn: &Connection, name: &str) -> Result<i64> {
    Ok(conn.pragma_query_value(None, name, |row| row.get(0))?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::schema::tests::schema_of;

    thread_local! {
        /// Connections this thread kept as spares (an inline store closes on its caller's
        /// thread, so a test sees its own).
        pub(crate) static KEPT_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn count(conn: &Connection, table: &str) -> Result<i64> {
        let sql = format!("SELECT count(*) FROM main.{table}");
        Ok(conn.query_row(&sql, [], |row| row.get(0))?)
    }

    /// Every row of every table of a fresh store.
    fn dump(conn: &Connection) -> Result<Vec<Vec<Row>>> {
        Image::get()?.tables.iter().map(|(table, _)| rows_of(conn, table)).collect()
    }

    fn fresh() -> Result<Connection> {
        let mut conn = Connection::open_in_memory()?;
        schema::create(&mut conn)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        Ok(conn)
    }

    const FILL: &str = "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq,
        event_type, payload, created_at_ms) SELECT 'default', 'custom', 's', value, 't',
        zeroblob(4000), 0 FROM (WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL
        SELECT value + 1 FROM n WHERE value < 500) SELECT value FROM n)";

    /// A few small rows: they fit in the tables' first pages, so the database does not grow.
    const SMALL_FILL: &str = "INSERT INTO main.events (tenant_id, stream_kind, stream_id, seq,
        event_type, payload, created_at_ms) SELECT 'default', 'custom', 's', value, 't', '{}', 0
        FROM (WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM n
        WHERE value < 5) SELECT value FROM n)";

    /// Rows linked by foreign keys: a snapshot of an execution of a definition.
    const LINKED: &str = "INSERT INTO main.workflow_definitions VALUES ('default', 'w', 'v1',
        '{}', 'h', 1, 0);
        INSERT INTO main.workflow_executions VALUES ('default', 'e', 'w', 'v1', 'running', '{}',
        '{}', 0, 0, 0, NULL);
        INSERT INTO main.workflow_snapshots VALUES ('default', 'e', 0, '{}', 'h', 0);";

    #[test]
    fn a_copy_of_the_image_is_a_fresh_store_of_its_own_that_grows() -> Result<()> {
        let copied = memory_connection()?.conn;
        assert_eq!(schema_of(&copied)?, schema_of(&fresh()?)?);
        copied.execute_batch(FILL)?;
        let other = memory_connection()?.conn;
        assert_eq!((count(&copied, "events")?, count(&other, "events")?), (500, 0));
        Ok(())
    }

    #[test]
    fn a_wiped_connection_holds_nothing_and_counts_from_the_start_again() -> Result<()> {
        let conn = fresh()?;
        conn.execute_batch(SMALL_FILL)?;
        conn.execute_batch(LINKED)?;
        // A fresh store's own row gone too: the wipe puts it back.
        conn.execute_batch("DELETE FROM main.tenants")?;
        let positions = "SELECT max(position) FROM main.events";
        let first: i64 = conn.query_row(positions, [], |row| row.get(0))?;
        assert!(wipe(&conn)?);
        assert_eq!(dump(&conn)?, dump(&fresh()?)?, "a fresh store's rows, and only those");
        conn.execute_batch(SMALL_FILL)?;
        let again: i64 = conn.query_row(positions, [], |row| row.get(0))?;
        assert_eq!(again, first, "positions start again from 1");
        assert_eq!(schema::read_pragma(&conn, "foreign_keys")?, "1");
        Ok(())
    }

    #[test]
    fn every_table_comes_before_the_tables_its_foreign_keys_point_to() -> Result<()> {
        let conn = fresh()?;
        let order: Vec<&str> = Image::get()?.tables.iter().map(|(t, _)| t.as_str()).collect();
        let mut links = 0;
        for (index, table) in order.iter().enumerate() {
            let sql = format!("SELECT \"table\" FROM pragma_foreign_key_list('{table}')");
            let mut statement = conn.prepare(&sql)?;
            let parents = statement.query_map([], |row| row.get::<_, String>(0))?;
            for parent in parents {
                let parent = parent?;
                let at = order.iter().position(|t| *t == parent).expect("a table of the schema");
                assert!(at > index || parent == *table, "{table} comes before {parent}");
                links += 1;
            }
        }
        assert!(links >= 6, "the schema's foreign keys were seen ({links})");
        Ok(())
    }

    #[test]
    fn a_connection_that_grew_is_not_kept() -> Result<()> {
        let conn = fresh()?;
        conn.execute_batch(FILL)?;
        assert!(!wipe(&conn)?, "its size would show to the next store");
        assert_eq!(count(&conn, "events")?, 500, "nothing was deleted");
        Ok(())
    }

    #[test]
    fn a_connection_whose_schema_changed_is_not_wiped() -> Result<()> {
        let conn = fresh()?;
        conn.execute_batch(
            "CREATE TABLE mine (x INTEGER); DROP TABLE mine; INSERT INTO
            main.tenants (tenant_id, name, status, created_at_ms, updated_at_ms)
            VALUES ('t', 't', 'active', 0, 0)",
        )?;
        assert!(!wipe(&conn)?);
        assert_eq!(count(&conn, "tenants")?, 2, "nothing was deleted");
        let open = fresh()?;
        open.execute_batch(
            "BEGIN; INSERT INTO main.tenants (tenant_id, name, status,
            created_at_ms, updated_at_ms) VALUES ('t', 't', 'active', 0, 0)",
        )?;
        assert!(!wipe(&open)?, "a connection inside a transaction is not wiped");
        Ok(())
    }
}
