//! Copying a store from a SQLite file into a PostgreSQL database (feature `postgres`), and
//! verifying the copy: [`sqlite_to_postgres`].
//!
//! The source file is opened once as a store first (an older file is migrated to the current
//! schema), then read in one read transaction (a consistent snapshot: other processes may go
//! on writing it meanwhile). The target is opened as a store too (its schema created at the
//! current version) and must hold nothing but what a fresh store holds. Every table
//! `schema.sql` creates is then copied in one PostgreSQL transaction, parents before the
//! tables whose foreign keys name them, rows in primary-key order, each value converted to its
//! column's type; identity columns are advanced past what was copied (and past SQLite's
//! AUTOINCREMENT counters), and each table's row count and digest are compared on both sides
//! before `COMMIT`. Whatever fails, the target keeps nothing of the copy.
//!
//! The tables come from the schema, not from a list here: a table `schema.sql` gains is copied
//! as soon as both schemas have it, and one the target lacks fails the migration by name. The
//! source's other tables (a caller's own, made through `Tx::sqlite`) are not copied: the report
//! names them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, GenericClient, Transaction};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest, Sha256};

use crate::core::clock::ManualClock;
use crate::core::pg::{Raw, value_ref};
use crate::core::schema::{SCHEMA_SQL, SCHEMA_VERSION, digest_value, quoted};
use crate::core::store_file;
use crate::error::Error;
use crate::hash::hex;
use crate::options::Options;
use crate::store::Store;

/// What a migration copied and verified.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MigrationReport {
    /// The store's tables, in the order they were copied, each verified.
    pub tables: Vec<TableReport>,
    /// The identity columns of the target, advanced past what was copied.
    pub sequences: Vec<SequenceReport>,
    /// Tables of the source file that are not the store's (a caller's own, made through
    /// `Tx::sqlite`): not copied.
    pub not_copied: Vec<String>,
}

impl MigrationReport {
    /// How many rows were copied, every table together.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|table| table.rows).sum()
    }
}

/// One table as copied: its rows, and the digest both sides agreed on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TableReport {
    /// The table's name.
    pub name: String,
    /// Rows copied.
    pub rows: u64,
    /// The SHA-256 of its rows in primary-key order (hex), the same on both sides.
    pub digest: String,
}

/// An identity column of the target and the last value it was set to: the next row gets a
/// larger one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SequenceReport {
    /// The table.
    pub table: String,
    /// The identity column.
    pub column: String,
    /// The value the column's sequence was set to (the largest copied, or SQLite's
    /// AUTOINCREMENT counter if that is larger).
    pub last_value: i64,
}

/// Why a migration did not happen. In every case the target keeps nothing of the copy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// There is no file at the source path.
    #[error("no store file at {0}")]
    SourceMissing(PathBuf),
    /// The target already holds data: a store is copied only into an empty one.
    #[error(
        "the target is not empty: table {table} holds {rows} rows (a fresh store's hold none \
         but the default tenant); migrate into a new schema"
    )]
    TargetNotEmpty {
        /// The first table found holding more than a fresh store's rows.
        table: String,
        /// Its rows.
        rows: u64,
    },
    /// The two schemas differ: a table or a column of one is missing from the other.
    #[error("the schemas differ at table {table}: {detail}")]
    SchemaMismatch {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// A value of the source cannot be stored in its column of the target.
    #[error("table {table}, column {column}: {detail}")]
    Unconvertible {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// Why.
        detail: String,
    },
    /// The copy read back from the target differs from the source (rolled back).
    #[error("the copy of table {table} does not match the source: {detail}")]
    Mismatch {
        /// The table.
        table: String,
        /// What differs (row counts, or digests).
        detail: String,
    },
    /// A store error: opening either store, or a statement on either side.
    #[error(transparent)]
    Store(#[from] Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<postgres::Error> for MigrateError {
    fn from(error: postgres::Error) -> Self {
        Self::Store(Error::from_postgres(error))
    }
}

impl From<MigrateError> for Error {
    /// The crate's error for a failed migration: the store errors as they are, the others as
    /// `NotFound`, `Conflict` or `Corrupt`.
    fn from(error: MigrateError) -> Self {
        match error {
            MigrateError::Store(error) => error,
            MigrateError::SourceMissing(path) => {
                Error::NotFound { kind: "store file", id: path.display().to_string() }
            }
            MigrateError::TargetNotEmpty { .. } | MigrateError::SchemaMismatch { .. } => {
                Error::Conflict(error.to_string())
            }
            MigrateError::Unconvertible { .. } | MigrateError::Mismatch { .. } => {
                Error::Corrupt(error.to_string())
            }
        }
    }
}

/// Copies the store in the SQLite file `from` into the PostgreSQL database `to_url` (a
/// `postgres://` URL or a `key=value` connection string; the store goes into the connection's
/// current schema, as [`Store::connect`] has it), and verifies the copy: every tenant and
/// domain, events with their positions and per-stream seqs, queue items with their attempts,
/// fences and leases, dead letters, processes with their events, leases and fencing tokens,
/// graphs as they stand (also mid-run), workflows and snapshots, tenants and API tokens.
///
/// The source is opened once with [`Store::open`] (without recovering interrupted graphs:
/// they are copied as they stand), so an older file is migrated to the current schema first;
/// it is then read in one read transaction, a consistent snapshot. The target is created (or
/// opened) with [`Store::connect`] and must hold no more than a fresh store (the default
/// tenant). Everything is copied in one transaction that holds off the target's other writers;
/// identity columns continue after the copied values, so the next append gets a position
/// after every copied one; each table's row count and digest (SHA-256 of its rows in
/// primary-key order) are compared on both sides before the commit.
///
/// # Errors
/// `SourceMissing` when there is no file at `from`; `TargetNotEmpty` when the target holds
/// data (nothing is written to it); `SchemaMismatch` when the target lacks a table or a column
/// of the source; `Unconvertible` for a value its target column cannot hold; `Mismatch` when a
/// table read back differs from the source (the copy is rolled back); `Store` for the errors
/// of opening either store (`SchemaTooNew`, `NotADatabase`, `Postgres`, ...) and of the
/// statements. In every case the target keeps nothing of the copy.
pub fn sqlite_to_postgres(from: &Path, to_url: &str) -> Result<MigrationReport, MigrateError> {
    if !from.is_file() {
        return Err(MigrateError::SourceMissing(from.to_path_buf()));
    }
    // Opened as stores only to bring the file to the current schema and to create the
    // target's: no recovery, and a clock at the epoch, so that no deadline passes there
    // either (graphs are copied as they stand).
    let clock = Arc::new(ManualClock::new(0));
    let untouched = Options { recover_on_open: false, clock, ..Options::default() };
    Store::open_with(from, untouched.clone())?.close()?;
    let mut source = open_source(from)?;
    let snapshot = source.transaction()?;
    let (plans, not_copied) = read_plans(&snapshot)?;
    let fresh = fresh_summaries(&plans)?;
    refuse_if_not_empty(to_url, &plans, &fresh)?;
    Store::connect_with(to_url, untouched)?.close()?;
    let mut target = connect_target(to_url)?;
    let (tables, sequences) = copy_all(&snapshot, &mut target, &plans, &fresh)?;
    Ok(MigrationReport { tables, sequences, not_copied })
}

/// A store table as both sides read and write it: its columns in the source's order, and its
/// primary key (every column if it has none).
#[derive(Debug)]
struct TablePlan {
    name: String,
    columns: Vec<String>,
    key: Vec<String>,
}

/// A table's rows, counted and digested in primary-key order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    rows: u64,
    digest: [u8; 32],
}

/// Rows digested one value at a time, the same way on both sides.
struct Digester {
    hasher: Sha256,
    rows: u64,
}

impl Digester {
    fn new() -> Self {
        Self { hasher: Sha256::new(), rows: 0 }
    }

    /// Adds one value (in SQLite's storage classes: what both sides read back as).
    fn value(&mut self, value: ValueRef<'_>) {
        digest_value(&mut self.hasher, value);
    }

    /// A row has ended.
    fn row(&mut self) {
        self.rows += 1;
    }

    fn finish(self) -> Summary {
        Summary { rows: self.rows, digest: self.hasher.finalize().into() }
    }
}

/// The source file on a connection of its own, which only reads. It is opened writable (not
/// created) all the same: the last connection to close a WAL file cleans its `-wal` and
/// `-shm` files up only if it may write.
fn open_source(from: &Path) -> Result<Connection, MigrateError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(store_file::sqlite_name(from), flags)?;
    conn.busy_timeout(Options::default().busy_timeout)?;
    Ok(conn)
}

/// The store's own tables: every table `schema.sql` creates, in its order.
fn own_tables() -> Vec<String> {
    let names = SCHEMA_SQL.lines().filter_map(|line| line.trim().strip_prefix("CREATE TABLE "));
    names
        .filter_map(|rest| rest.split(|c: char| c.is_whitespace() || c == '(').next())
        .map(str::to_owned)
        .collect()
}

/// The plan of every store table from the source's own catalogue, and the source's other
/// tables (not copied). A store table the source lacks is a `SchemaMismatch`.
fn read_plans(conn: &Connection) -> Result<(Vec<TablePlan>, Vec<String>), MigrateError> {
    let present = sqlite_tables(conn)?;
    let own = own_tables();
    let mut plans = Vec::with_capacity(own.len());
    for name in &own {
        if !present.contains(name) {
            let detail = "the source file lacks it".to_owned();
            return Err(MigrateError::SchemaMismatch { table: name.clone(), detail });
        }
        plans.push(sqlite_plan(conn, name)?);
    }
    let not_copied = present.into_iter().filter(|name| !own.contains(name)).collect();
    Ok((plans, not_copied))
}

/// The tables of a SQLite database (SQLite's own left out), sorted.
fn sqlite_tables(conn: &Connection) -> Result<BTreeSet<String>, MigrateError> {
    let sql = "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'";
    let mut statement = conn.prepare(sql)?;
    let names = statement.query_map([], |row| row.get::<_, String>(0))?;
    Ok(names.collect::<Result<_, _>>()?)
}

/// Table `name`'s columns and primary key, read from SQLite's catalogue.
fn sqlite_plan(conn: &Connection, name: &str) -> Result<TablePlan, MigrateError> {
    let sql = "SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid";
    let mut statement = conn.prepare(sql)?;
    let rows = statement.query_map([name], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))?;
    let columns: Vec<(String, i64)> = rows.collect::<Result<_, _>>()?;
    let mut key: Vec<&(String, i64)> = columns.iter().filter(|(_, pk)| *pk > 0).collect();
    key.sort_by_key(|(_, pk)| *pk);
    let mut key: Vec<String> = key.into_iter().map(|(column, _)| column.clone()).collect();
    let columns: Vec<String> = columns.into_iter().map(|(column, _)| column).collect();
    if key.is_empty() {
        key.clone_from(&columns);
    }
    Ok(TablePlan { name: name.to_owned(), columns, key })
}

/// What each store table holds in a fresh store (`schema.sql` applied to an empty database):
/// what an empty target may hold.
fn fresh_summaries(plans: &[TablePlan]) -> Result<Vec<Summary>, MigrateError> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(SCHEMA_SQL)?;
    plans.iter().map(|plan| sqlite_summary(&conn, plan)).collect()
}

/// A table's rows on SQLite, counted and digested in primary-key order.
fn sqlite_summary(conn: &Connection, plan: &TablePlan) -> Result<Summary, MigrateError> {
    let mut statement = conn.prepare(&sqlite_select(plan))?;
    let mut rows = statement.query([])?;
    let mut digester = Digester::new();
    while let Some(row) = rows.next()? {
        for index in 0..plan.columns.len() {
            digester.value(row.get_ref(index)?);
        }
        digester.row();
    }
    Ok(digester.finish())
}

/// The columns of `plan`, quoted and joined.
fn column_list(plan: &TablePlan) -> String {
    let columns: Vec<String> = plan.columns.iter().map(|column| quoted(column)).collect();
    columns.join(", ")
}

/// Every row of the table on SQLite, in primary-key order (text compared as bytes).
fn sqlite_select(plan: &TablePlan) -> String {
    let key: Vec<String> =
        plan.key.iter().map(|column| format!("{} COLLATE BINARY", quoted(column))).collect();
    let table = quoted(&plan.name);
    format!("SELECT {} FROM main.{table} ORDER BY {}", column_list(plan), key.join(", "))
}

/// Every row of the table on PostgreSQL, in primary-key order (text compared as bytes, as
/// SQLite does).
fn postgres_select(plan: &TablePlan, types: &[Type]) -> String {
    let key: Vec<String> = plan
        .key
        .iter()
        .map(|column| {
            let index = plan.columns.iter().position(|name| name == column);
            let text = index.and_then(|index| types.get(index)).is_some_and(is_text);
            let collate = if text { " COLLATE \"C\"" } else { "" };
            format!("{}{collate}", quoted(column))
        })
        .collect();
    let table = quoted(&plan.name);
    format!("SELECT {} FROM {table} ORDER BY {}", column_list(plan), key.join(", "))
}

/// Whether values of type `ty` are text.
fn is_text(ty: &Type) -> bool {
    [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty)
}

/// Connects to the target and puts the store's schema (the connection's current one) first on
/// its search path, as the store does. `None` when the connection has no current schema (no
/// store was created there yet).
fn connect_raw(to_url: &str) -> Result<(Client, Option<String>), MigrateError> {
    let mut client = crate::core::pg::connect_client(to_url)?;
    let schema: Option<String> =
        client.query_one("SELECT current_schema()::text", &[])?.try_get(0)?;
    if let Some(schema) = &schema {
        let path = format!("SET search_path = {}, pg_catalog, pg_temp", quoted(schema));
        client.batch_execute(&path)?;
    }
    Ok((client, schema))
}

/// The target, once the store exists there.
fn connect_target(to_url: &str) -> Result<Client, MigrateError> {
    match connect_raw(to_url)? {
        (client, Some(_)) => Ok(client),
        (_, None) => Err(Error::InvalidInput(
            "the target connection has no current schema after the store was created".into(),
        )
        .into()),
    }
}

/// Refuses a target that holds a store with data, before anything is written to it (opening a
/// store there could write: a deadline sweep, say).
fn refuse_if_not_empty(
    to_url: &str,
    plans: &[TablePlan],
    fresh: &[Summary],
) -> Result<(), MigrateError> {
    let (mut client, schema) = connect_raw(to_url)?;
    // No store there yet, or one of another version (which `Store::connect` refuses next).
    if schema.is_none() || store_version(&mut client)? != Some(SCHEMA_VERSION) {
        return Ok(());
    }
    let mut check = client.build_transaction().read_only(true).start()?;
    let types = target_types(&mut check, plans)?;
    refuse_non_empty(&mut check, plans, &types, fresh)
}

/// The schema version of the store in the target's schema, `None` if it holds no store.
fn store_version(client: &mut impl GenericClient) -> Result<Option<i64>, MigrateError> {
    let exists = "SELECT to_regclass('spindle_meta') IS NOT NULL";
    if !client.query_one(exists, &[])?.try_get::<_, bool>(0)? {
        return Ok(None);
    }
    let sql = "SELECT value FROM spindle_meta WHERE key = 'schema_version'";
    Ok(client.query_opt(sql, &[])?.map(|row| row.try_get(0)).transpose()?)
}

/// `TargetNotEmpty` for the first table that holds other rows than a fresh store's.
fn refuse_non_empty(
    client: &mut impl GenericClient,
    plans: &[TablePlan],
    types: &[Vec<Type>],
    fresh: &[Summary],
) -> Result<(), MigrateError> {
    for ((plan, types), fresh) in plans.iter().zip(types).zip(fresh) {
        let found = postgres_summary(client, plan, types)?;
        if found != *fresh {
            return Err(MigrateError::TargetNotEmpty {
                table: plan.name.clone(),
                rows: found.rows,
            });
        }
    }
    Ok(())
}

/// The target's column types of every table, in each plan's column order; a table or column
/// the target lacks (or one it has that the source lacks) is a `SchemaMismatch`.
fn target_types(
    client: &mut impl GenericClient,
    plans: &[TablePlan],
) -> Result<Vec<Vec<Type>>, MigrateError> {
    let found = target_columns(client)?;
    plans.iter().map(|plan| plan_types(plan, found.get(&plan.name))).collect()
}

/// The types of `plan`'s columns among the target table's `columns`.
fn plan_types(
    plan: &TablePlan,
    columns: Option<&BTreeMap<String, Type>>,
) -> Result<Vec<Type>, MigrateError> {
    let mismatch =
        |detail: String| MigrateError::SchemaMismatch { table: plan.name.clone(), detail };
    let columns = columns.ok_or_else(|| mismatch("the target lacks it".into()))?;
    if let Some(extra) = columns.keys().find(|name| !plan.columns.contains(name)) {
        return Err(mismatch(format!("the source lacks the target's column {extra}")));
    }
    let types = plan.columns.iter().map(|column| {
        columns
            .get(column)
            .cloned()
            .ok_or_else(|| mismatch(format!("the target lacks column {column}")))
    });
    types.collect()
}

/// The columns of every table of the target's schema, with their types.
fn target_columns(
    client: &mut impl GenericClient,
) -> Result<BTreeMap<String, BTreeMap<String, Type>>, MigrateError> {
    let sql = "SELECT c.relname::text, a.attname::text, a.atttypid
               FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
               WHERE c.relnamespace = to_regnamespace(current_schema()) AND c.relkind = 'r'
                 AND a.attnum > 0 AND NOT a.attisdropped";
    let mut tables: BTreeMap<String, BTreeMap<String, Type>> = BTreeMap::new();
    for row in client.query(sql, &[])? {
        let oid: u32 = row.try_get(2)?;
        let ty = Type::from_oid(oid).unwrap_or(Type::UNKNOWN);
        tables.entry(row.try_get(0)?).or_default().insert(row.try_get(1)?, ty);
    }
    Ok(tables)
}

/// A table's rows on PostgreSQL, counted and digested in primary-key order, each value read
/// back in the storage class SQLite would hold it in.
fn postgres_summary(
    client: &mut impl GenericClient,
    plan: &TablePlan,
    types: &[Type],
) -> Result<Summary, MigrateError> {
    let sql = postgres_select(plan, types);
    let mut rows = client.query_raw(sql.as_str(), std::iter::empty::<&(dyn ToSql + Sync)>())?;
    let mut digester = Digester::new();
    while let Some(row) = rows.next()? {
        for (index, column) in plan.columns.iter().enumerate() {
            let Raw(raw) = row.try_get::<_, Raw<'_>>(index)?;
            let value = match raw {
                None => ValueRef::Null,
                Some((ty, bytes)) => value_ref(&ty, bytes)
                    .map_err(|error| unconvertible(plan, column, error.to_string()))?,
            };
            digester.value(value);
        }
        digester.row();
    }
    Ok(digester.finish())
}

/// Copies every table in one transaction of the target, verifies each, and commits.
fn copy_all(
    source: &Connection,
    target: &mut Client,
    plans: &[TablePlan],
    fresh: &[Summary],
) -> Result<(Vec<TableReport>, Vec<SequenceReport>), MigrateError> {
    let mut tx = target.transaction()?;
    lock_tables(&mut tx, plans)?;
    let types = target_types(&mut tx, plans)?;
    refuse_non_empty(&mut tx, plans, &types, fresh)?;
    let order = copy_order(&mut tx, plans)?;
    for &index in order.iter().rev() {
        tx.batch_execute(&format!("DELETE FROM {}", quoted(&plans[index].name)))?;
    }
    let mut tables = Vec::with_capacity(plans.len());
    for &index in &order {
        let (plan, types) = (&plans[index], &types[index]);
        let copied = copy_table(source, &mut tx, plan, types)?;
        verify(&mut tx, plan, types, &copied)?;
        tables.push(TableReport {
            name: plan.name.clone(),
            rows: copied.rows,
            digest: hex(&copied.digest),
        });
    }
    let sequences = advance_identities(source, &mut tx)?;
    tx.commit()?;
    Ok((tables, sequences))
}

/// Holds off every other writer of the store's tables until the copy commits (readers go on).
fn lock_tables(tx: &mut Transaction<'_>, plans: &[TablePlan]) -> Result<(), MigrateError> {
    let names: Vec<String> = plans.iter().map(|plan| quoted(&plan.name)).collect();
    tx.batch_execute(&format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", ")))?;
    Ok(())
}

/// The order the foreign keys of the target accept: each table after every table its foreign
/// keys name (indexes into `plans`; otherwise the schema's order).
fn copy_order(
    client: &mut impl GenericClient,
    plans: &[TablePlan],
) -> Result<Vec<usize>, MigrateError> {
    let parents = foreign_keys(client)?;
    let mut order: Vec<usize> = Vec::with_capacity(plans.len());
    while order.len() < plans.len() {
        let ready = (0..plans.len()).find(|&index| {
            let waits = parents.get(&plans[index].name).is_some_and(|names| {
                names.iter().any(|parent| {
                    parent != &plans[index].name
                        && !order.iter().any(|&done| &plans[done].name == parent)
                })
            });
            !order.contains(&index) && !waits
        });
        let Some(ready) = ready else {
            let detail = "its foreign keys form a cycle".to_owned();
            let table = plans.iter().find(|plan| parents.contains_key(&plan.name));
            let table = table.map_or_else(String::new, |plan| plan.name.clone());
            return Err(MigrateError::SchemaMismatch { table, detail });
        };
        order.push(ready);
    }
    Ok(order)
}

/// The tables each table's foreign keys name, in the target's schema.
fn foreign_keys(
    client: &mut impl GenericClient,
) -> Result<BTreeMap<String, BTreeSet<String>>, MigrateError> {
    let sql = "SELECT c.relname::text, p.relname::text
               FROM pg_catalog.pg_constraint k
               JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
               JOIN pg_catalog.pg_class p ON p.oid = k.confrelid
               WHERE k.contype = 'f' AND c.relnamespace = to_regnamespace(current_schema())";
    let mut parents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in client.query(sql, &[])? {
        parents.entry(row.try_get(0)?).or_default().insert(row.try_get(1)?);
    }
    Ok(parents)
}

/// Copies one table's rows from the source snapshot (binary `COPY`, in primary-key order);
/// returns what was sent, counted and digested.
fn copy_table(
    source: &Connection,
    tx: &mut Transaction<'_>,
    plan: &TablePlan,
    types: &[Type],
) -> Result<Summary, MigrateError> {
    let mut statement = source.prepare(&sqlite_select(plan))?;
    let mut rows = statement.query([])?;
    let copy = format!("COPY {} ({}) FROM STDIN BINARY", quoted(&plan.name), column_list(plan));
    let mut writer = BinaryCopyInWriter::new(tx.copy_in(copy.as_str())?, types);
    let mut digester = Digester::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(types.len());
        for (index, (column, ty)) in plan.columns.iter().zip(types).enumerate() {
            let value = row.get_ref(index)?;
            digester.value(value);
            values.push(encode(value, ty).map_err(|detail| unconvertible(plan, column, detail))?);
        }
        digester.row();
        let params: Vec<&(dyn ToSql + Sync)> =
            values.iter().map(|value| value as &(dyn ToSql + Sync)).collect();
        writer.write(&params).map_err(|error| in_table(plan, error))?;
    }
    writer.finish().map_err(|error| in_table(plan, error))?;
    Ok(digester.finish())
}

/// Reads the table back from the target and compares it with what the source held.
fn verify(
    tx: &mut Transaction<'_>,
    plan: &TablePlan,
    types: &[Type],
    copied: &Summary,
) -> Result<(), MigrateError> {
    let found = postgres_summary(tx, plan, types)?;
    let detail = if found.rows != copied.rows {
        format!("{} rows in the source, {} in the target", copied.rows, found.rows)
    } else if found.digest != copied.digest {
        format!(
            "the digests differ ({} in the source, {} in the target)",
            hex(&copied.digest),
            hex(&found.digest)
        )
    } else {
        return Ok(());
    };
    Err(MigrateError::Mismatch { table: plan.name.clone(), detail })
}

/// Sets every identity column's sequence of the target past the largest value copied into it
/// and past SQLite's AUTOINCREMENT counter of its table, so that a value is never handed out
/// twice.
fn advance_identities(
    source: &Connection,
    tx: &mut Transaction<'_>,
) -> Result<Vec<SequenceReport>, MigrateError> {
    let mut advanced = Vec::new();
    for (table, column) in identity_columns(tx)? {
        let copied = max_value(tx, &table, &column)?;
        let counted = autoincrement_counter(source, &table)?;
        let last_value = copied.max(counted);
        if last_value < 1 {
            continue;
        }
        set_sequence(tx, &table, &column, last_value)?;
        advanced.push(SequenceReport { table, column, last_value });
    }
    Ok(advanced)
}

/// The identity columns of the target's schema, as (table, column).
fn identity_columns(tx: &mut Transaction<'_>) -> Result<Vec<(String, String)>, MigrateError> {
    let sql = "SELECT table_name::text, column_name::text FROM information_schema.columns
               WHERE table_schema = current_schema() AND is_identity = 'YES'
               ORDER BY table_name, column_name";
    let rows = tx.query(sql, &[])?;
    let columns = rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?)));
    columns.collect::<Result<_, postgres::Error>>().map_err(MigrateError::from)
}

/// The largest value of `column` in `table` of the target, 0 for none.
fn max_value(tx: &mut Transaction<'_>, table: &str, column: &str) -> Result<i64, MigrateError> {
    let sql = format!("SELECT COALESCE(max({})::bigint, 0) FROM {}", quoted(column), quoted(table));
    Ok(tx.query_one(sql.as_str(), &[])?.try_get(0)?)
}

/// SQLite's AUTOINCREMENT counter of `table` in the source, 0 for none.
fn autoincrement_counter(source: &Connection, table: &str) -> Result<i64, MigrateError> {
    let sql = "SELECT count(*) FROM main.sqlite_master WHERE name = 'sqlite_sequence'";
    let exists = source.query_row(sql, [], |row| row.get::<_, i64>(0))? > 0;
    if !exists {
        return Ok(0);
    }
    let sql = "SELECT COALESCE(max(seq), 0) FROM main.sqlite_sequence WHERE name = ?1";
    Ok(source.query_row(sql, [table], |row| row.get(0))?)
}

/// Sets the sequence behind `table.column` so that its next value is `last_value + 1`.
fn set_sequence(
    tx: &mut Transaction<'_>,
    table: &str,
    column: &str,
    last_value: i64,
) -> Result<(), MigrateError> {
    let sql = "SELECT setval(pg_get_serial_sequence($1, $2), $3, true)";
    tx.query_one(sql, &[&quoted(table), &column, &last_value])?;
    Ok(())
}

fn unconvertible(plan: &TablePlan, column: &str, detail: String) -> MigrateError {
    MigrateError::Unconvertible { table: plan.name.clone(), column: column.to_owned(), detail }
}

/// A PostgreSQL error of copying `plan`'s table, named.
fn in_table(plan: &TablePlan, error: postgres::Error) -> MigrateError {
    let error = Error::from_postgres(error);
    MigrateError::Store(Error::Postgres(format!("copying table {}: {error}", plan.name)))
}

/// A value in its binary form for a column of the target, or `None` for NULL.
#[derive(Debug)]
struct Encoded(Option<Vec<u8>>);

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A SQLite value converted for a target column of type `ty`; the error says why it cannot
/// be.
fn encode(value: ValueRef<'_>, ty: &Type) -> std::result::Result<Encoded, String> {
    let narrow = |number: i64, bytes: usize| -> std::result::Result<Vec<u8>, String> {
        let wide = number.to_be_bytes();
        let fits = match bytes {
            4 => i32::try_from(number).is_ok(),
            _ => i16::try_from(number).is_ok(),
        };
        fits.then(|| wide[8 - bytes..].to_vec())
            .ok_or_else(|| format!("{number} does not fit a {ty}"))
    };
    let bytes = match (value, ty) {
        (ValueRef::Null, _) => return Ok(Encoded(None)),
        (ValueRef::Integer(number), &Type::INT8) => number.to_be_bytes().to_vec(),
        (ValueRef::Integer(number), &Type::INT4) => narrow(number, 4)?,
        (ValueRef::Integer(number), &Type::INT2) => narrow(number, 2)?,
        (ValueRef::Integer(number @ (0 | 1)), &Type::BOOL) => vec![u8::from(number == 1)],
        (ValueRef::Integer(number), &Type::FLOAT8) => (number as f64).to_be_bytes().to_vec(),
        (ValueRef::Real(number), &Type::FLOAT8) => number.to_be_bytes().to_vec(),
        (ValueRef::Text(text), ty) if is_text(ty) || *ty == Type::JSON => utf8(text)?.to_vec(),
        (ValueRef::Text(text), &Type::JSONB) => [&[1], utf8(text)?].concat(),
        (ValueRef::Blob(bytes) | ValueRef::Text(bytes), &Type::BYTEA) => bytes.to_vec(),
        (value, ty) => {
            return Err(format!("a {:?} value cannot be stored as {ty}", value.data_type()));
        }
    };
    Ok(Encoded(Some(bytes)))
}

/// `text` if it is UTF-8 (PostgreSQL's text must be).
fn utf8(text: &[u8]) -> std::result::Result<&[u8], String> {
    std::str::from_utf8(text)
        .map(str::as_bytes)
        .map_err(|error| format!("text that is not UTF-8: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_tables_are_read_from_the_schema() {
        let tables = own_tables();
        assert_eq!(tables.first().map(String::as_str), Some("tenants"));
        for table in ["events", "queue_items", "graphs", "processes", "workflow_snapshots"] {
            assert!(tables.iter().any(|name| name == table), "{table} in {tables:?}");
        }
    }

    #[test]
    fn values_convert_and_read_back_as_sqlite_holds_them() {
        let cases = [
            (ValueRef::Integer(-7), Type::INT8),
            (ValueRef::Integer(-7), Type::INT4),
            (ValueRef::Integer(300), Type::INT2),
            (ValueRef::Integer(1), Type::BOOL),
            (ValueRef::Real(2.5), Type::FLOAT8),
            (ValueRef::Text(b"caf\xc3\xa9"), Type::TEXT),
            (ValueRef::Text(b"{\"a\":1}"), Type::JSONB),
            (ValueRef::Blob(b"\x00\x01"), Type::BYTEA),
        ];
        for (value, ty) in cases {
            let Encoded(Some(bytes)) = encode(value, &ty).expect("converts") else {
                panic!("{value:?} encoded as NULL");
            };
            assert_eq!(value_ref(&ty, &bytes).expect("reads back"), value, "{ty}");
        }
        assert!(encode(ValueRef::Integer(1 << 40), &Type::INT4).is_err());
        assert!(encode(ValueRef::Text(b"\xff"), &Type::TEXT).is_err());
        assert!(encode(ValueRef::Real(1.5), &Type::INT8).is_err());
    }

    #[test]
    fn a_fresh_store_holds_only_the_default_tenant() -> Result<(), MigrateError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA_SQL)?;
        let (plans, not_copied) = read_plans(&conn)?;
        assert!(not_copied.is_empty());
        let fresh = fresh_summaries(&plans)?;
        let rows: Vec<(&str, u64)> = plans
            .iter()
            .zip(&fresh)
            .filter(|(_, summary)| summary.rows > 0)
            .map(|(plan, summary)| (plan.name.as_str(), summary.rows))
            .collect();
        assert_eq!(rows, [("tenants", 1)]);
        Ok(())
    }
}
