//! `CallGuard`: keeps a caller's own SQL (`Tx::sqlite` in a transaction closure) to the caller's
//! own tables and to its own transaction, and checks afterwards that the connection every later
//! batch runs on is still the one the store relies on.
//!
//! While a call runs, an authorizer looks at every statement as it is prepared. Statements of the
//! crate's own ops run as *internal* and are trusted; statements a closure runs through
//! `Tx::sqlite` are the caller's. A commit hook also turns any commit during a call into a rollback
//! (a statement running in autocommit after SQLite rolled the transaction back under the call).
//!
//! The store's connection outlives every transaction and serves every tenant, so the rule for
//! the caller's SQL is: it may read and write its own tables, inside this transaction, and
//! nothing else. The verdict for each of SQLite's authorizer action codes, and why:
//!
//! | action | verdict for the caller's SQL | why |
//! | --- | --- | --- |
//! | `SELECT`, `READ`, `RECURSIVE` | allowed; a view bound to a tenant by a token may not read the store's tables or `dbstat` | they hold every tenant's rows |
//! | `READ` of a virtual table from a view bound to a tenant | refused | a module (fts5 over a store table) may read with statements it prepared and authorized for another caller |
//! | `CREATE TRIGGER`, `CREATE VIRTUAL TABLE` from a view bound to a tenant | refused | a trigger runs with whoever fires it (the owner's SQL, unconfined), and a virtual table (`dbstat`, an fts table over a store table) reads what its module reads |
//! | `INSERT`, `UPDATE`, `DELETE` | refused on the store's tables and on `sqlite_stat1`, `sqlite_stat4`, `sqlite_sequence` | ops keep the store's invariants; statistics steer the store's query plans, and the sequence table keeps event positions from being reused |
//! | `CREATE TABLE`, `CREATE VIEW`, `DROP VIEW`, `CREATE`/`DROP VIRTUAL TABLE` | allowed in `main` (virtual tables refused in `temp`) | the caller's own schema, committed with its transaction |
//! | `VACUUM` | (no action code of its own) refused: it cannot run inside a transaction, and its `ATTACH` is refused | |
//! | `CREATE INDEX`, `CREATE TRIGGER`, `DROP INDEX`, `DROP TRIGGER`, `DROP TABLE`, `ALTER TABLE` | refused on the store's tables, allowed on the caller's | a trigger or index on a store table would run inside every op |
//! | every `CREATE TEMP …` and `DROP TEMP …` | refused | temporary objects live on the shared connection past the transaction, and a temporary table named like a store table would take its place in unqualified SQL |
//! | `PRAGMA` | refused, except the read-only ones in `READ_ONLY_PRAGMAS` and `SCHEMA_PRAGMAS` | a pragma changes the connection for every later batch of every tenant (`query_only`, `foreign_keys`, `writable_schema`, `cache_size`, …) |
//! | `TRANSACTION`, `SAVEPOINT` | refused | the batch's transaction belongs to the actor; compose with `Tx::exec` and `TxOutcome` |
//! | `ATTACH`, `DETACH` | refused | an attached database outlives the transaction and would be shared by every tenant |
//! | `ANALYZE` | refused | it rewrites the statistics the store's query plans rely on |
//! | `REINDEX` | allowed | it rebuilds an index with the same content |
//! | `FUNCTION` | allowed, except `load_extension` and `fts3_tokenizer` | those two load code into the connection |
//! | anything else (an action code newer than this list) | refused | unknown |
//!
//! Integrity checks (`integrity_check`, `quick_check`) read every table, so only the store
//! owner's views may run them. A call with a refused statement is refused whole: the actor
//! rolls it back and answers `Forbidden` even if the closure swallowed the error. After a closure that used `Tx::sqlite`, the actor reads the
//! connection's state back ([`ConnectionState`]) and refuses the closure if anything changed
//! (see `Actor::run_call`); this is defence in depth behind the authorizer.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::limits::{Limits, SQL_STEPS_PER_CHECK};

/// The store's own tables: every table `schema.sql` creates, read from it once, so that a
/// domain's new table is guarded without a list to keep.
fn own_tables() -> &'static [String] {
    static TABLES: LazyLock<Vec<String>> = LazyLock::new(|| {
        let schema = include_str!("../../../schema.sql");
        let names = schema.lines().filter_map(|line| line.trim().strip_prefix("CREATE TABLE "));
        names
            .filter_map(|rest| rest.split(|c: char| c.is_whitespace() || c == '(').next())
            .map(str::to_owned)
            .collect()
    });
    &TABLES
}

/// Pragmas a caller's SQL may read (never set): `PRAGMA name` or `pragma_name` with no value.
pub(crate) const READ_ONLY_PRAGMAS: &[&str] = &[
    "application_id",
    "collation_list",
    "compile_options",
    "data_version",
    "encoding",
    "foreign_keys",
    "freelist_count",
    "function_list",
    "journal_mode",
    "max_page_count",
    "module_list",
    "page_count",
    "page_size",
    "pragma_list",
    "query_only",
    "schema_version",
    "synchronous",
    "user_version",
];

/// Pragmas that describe the schema of the table or index they name: read-only whatever their
/// argument.
pub(crate) const SCHEMA_PRAGMAS: &[&str] = &[
    "foreign_key_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "table_info",
    "table_list",
    "table_xinfo",
];

/// Pragmas that read every table: only for the store owner's views.
const INTEGRITY_PRAGMAS: &[&str] = &["integrity_check", "quick_check"];

/// SQLite's own tables whose rows steer the store: query-planner statistics and the
/// `AUTOINCREMENT` counters.
const STEERING_TABLES: &[&str] = &["sqlite_stat1", "sqlite_stat4", "sqlite_sequence"];

/// SQL functions that load code into the connection.
const REFUSED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// The flags the hooks read.
#[derive(Debug, Default)]
pub(crate) struct CallGuard {
    in_call: AtomicBool,
    internal: AtomicBool,
    /// The call's view is bound to a tenant by a token: its raw SQL may not even read the
    /// store's tables (they hold every tenant's rows).
    confined: AtomicBool,
    /// Why the caller's last refused statement was refused, for its error.
    refusal: Mutex<Option<String>>,
    /// The first refusal of the running call: the call is refused whole, whatever it returns.
    call_refusal: Mutex<Option<String>>,
    /// The virtual tables of the schema (lowercase names): a view bound to a tenant may not
    /// read them, since a module may read the store's tables with statements it prepared for
    /// another caller (an fts table with `content='events'`, say).
    virtual_tables: Mutex<BTreeSet<String>>,
    /// Checks of the running caller call's steps so far (one per `SQL_STEPS_PER_CHECK`).
    checks: AtomicU64,
    /// The most checks a caller call may take (`Limits::sql_steps_max`).
    checks_max: AtomicU64,
    /// Whether the running call's SQL was interrupted for taking too many steps.
    exhausted: AtomicBool,
    /// The connection's longest string or blob.
    string_bytes_max: AtomicI64,
}

impl CallGuard {
    /// Installs the hooks on `conn`; they stay idle until `enter`. A caller's SQL may take at
    /// most `limits.sql_steps_max` steps per call, and handle values of at most
    /// `string_bytes_max(limits)` bytes.
    pub(crate) fn install(conn: &mut Connection, limits: &Limits) -> Result<Arc<CallGuard>> {
        let guard = Arc::new(CallGuard::default());
        let for_progress = Arc::clone(&guard);
        let every = i32::try_from(SQL_STEPS_PER_CHECK).unwrap_or(i32::MAX);
        conn.progress_handler(every, Some(move || for_progress.past_its_steps()))?;
        let for_commits = Arc::clone(&guard);
        conn.commit_hook(Some(move || for_commits.in_call.load(Ordering::Relaxed)))?;
        let for_statements = Arc::clone(&guard);
        conn.authorizer(Some(move |context: AuthContext<'_>| for_statements.authorize(&context)))?;
        guard.configure(conn, limits)?;
        Ok(guard)
    }

    /// Sets the bounds of a caller's SQL from `limits`: on a new guard, or on the guard a
    /// spare connection keeps installed (setting an authorizer again would make SQLite
    /// prepare every cached statement again).
    pub(crate) fn configure(&self, conn: &Connection, limits: &Limits) -> Result<()> {
        self.checks_max.store(limits.sql_steps_max / SQL_STEPS_PER_CHECK, Ordering::Relaxed);
        let bytes_max = string_bytes_max(limits);
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, bytes_max)?;
        self.string_bytes_max.store(i64::from(bytes_max), Ordering::Relaxed);
        Ok(())
    }

    /// A call starts running: an op's (`internal`) or a transaction closure's, for a view
    /// that is `confined` to its tenant or not.
    pub(crate) fn enter(&self, internal: bool, confined: bool) {
        self.call_refusal.lock().take();
        self.checks.store(0, Ordering::Relaxed);
        self.exhausted.store(false, Ordering::Relaxed);
        self.internal.store(internal, Ordering::Relaxed);
        self.confined.store(confined, Ordering::Relaxed);
        self.in_call.store(true, Ordering::Relaxed);
    }

    /// The call is done.
    pub(crate) fn leave(&self) {
        self.in_call.store(false, Ordering::Relaxed);
        self.internal.store(false, Ordering::Relaxed);
        self.refusal.lock().take();
    }

    /// Runs the crate's own work inside a call (an op composed into a closure, say).
    pub(crate) fn internal<T>(&self, f: impl FnOnce() -> T) -> T {
        let was = self.internal.swap(true, Ordering::Relaxed);
        let result = f();
        self.internal.store(was, Ordering::Relaxed);
        result
    }

    /// Why the caller's last statement was refused, if it was (taken: asked once).
    pub(crate) fn take_refusal(&self) -> Option<String> {
        self.refusal.lock().take()
    }

    /// Why the call that just ran had a statement refused, if it had: a closure that swallowed
    /// the error still does not commit.
    pub(crate) fn take_call_refusal(&self) -> Option<String> {
        self.call_refusal.lock().take()
    }

    /// The longest string or blob a statement may make (see `string_bytes_max`).
    pub(crate) fn string_bytes_max(&self) -> i64 {
        self.string_bytes_max.load(Ordering::Relaxed)
    }

    /// Whether the call that just ran had its SQL interrupted for taking too many steps.
    pub(crate) fn take_exhausted(&self) -> bool {
        self.exhausted.swap(false, Ordering::Relaxed)
    }

    /// The error for SQL that took too many steps.
    pub(crate) fn too_many_steps(&self) -> Error {
        let max = self.checks_max.load(Ordering::Relaxed).saturating_mul(SQL_STEPS_PER_CHECK);
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        Error::too_large("a transaction closure's SQL steps", max, max.saturating_add(1))
    }

    /// The progress handler: interrupts a caller's SQL past its steps (the store's own SQL
    /// runs unbounded).
    fn past_its_steps(&self) -> bool {
        let from_caller =
            self.in_call.load(Ordering::Relaxed) && !self.internal.load(Ordering::Relaxed);
        if !from_caller {
            return false;
        }
        let checks = self.checks.fetch_add(1, Ordering::Relaxed) + 1;
        let past = checks > self.checks_max.load(Ordering::Relaxed);
        if past {
            self.exhausted.store(true, Ordering::Relaxed);
        }
        past
    }

    /// Tells the guard the schema's virtual tables (read again whenever the schema moves).
    pub(crate) fn set_virtual_tables(&self, names: BTreeSet<String>) {
        *self.virtual_tables.lock() = names;
    }

    fn authorize(&self, context: &AuthContext<'_>) -> Authorization {
        let from_caller =
            self.in_call.load(Ordering::Relaxed) && !self.internal.load(Ordering::Relaxed);
        if !from_caller {
            return Authorization::Allow;
        }
        let confined = self.confined.load(Ordering::Relaxed);
        let refused = match context.action {
            AuthAction::Read { table_name, .. } if confined && self.is_virtual(table_name) => Some(
                format!("a view bound to a tenant may not read the virtual table {table_name}"),
            ),
            _ => refusal(context, confined),
        };
        match refused {
            None => Authorization::Allow,
            Some(reason) => {
                self.call_refusal.lock().get_or_insert_with(|| reason.clone());
                *self.refusal.lock() = Some(reason);
                Authorization::Deny
            }
        }
    }
}

impl CallGuard {
    fn is_virtual(&self, table: &str) -> bool {
        self.virtual_tables.lock().contains(&table.to_ascii_lowercase())
    }
}

/// The longest string or blob any statement may make: four times the largest payload, and at
/// least 64 MiB (the store's own values are at most a payload; a caller's SQL building a
/// gigabyte string in the store's thread is refused).
pub(crate) fn string_bytes_max(limits: &Limits) -> i32 {
    let bytes = limits.payload_bytes_max.saturating_mul(4).max(64 * 1024 * 1024);
    i32::try_from(bytes).unwrap_or(i32::MAX)
}

/// Why the caller's SQL may not do what `context` describes, or `None` if it may. The table
/// in the module docs says the same in words.
fn refusal(context: &AuthContext<'_>, confined: bool) -> Option<String> {
    let temp = context.database_name == Some("temp");
    match context.action {
        AuthAction::Select | AuthAction::Recursive | AuthAction::Reindex { .. } => None,
        AuthAction::Read { table_name, .. } => refuse_if(
            confined && (is_own_table(table_name) || table_name.eq_ignore_ascii_case("dbstat")),
            || format!("a view bound to a tenant may not read the store's table {table_name}"),
        ),
        AuthAction::Insert { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Delete { table_name } => writes_refused(table_name),
        AuthAction::CreateTable { .. } | AuthAction::CreateView { .. } => None,
        AuthAction::DropView { .. } => None,
        AuthAction::CreateVtable { table_name, .. } | AuthAction::DropVtable { table_name, .. } => {
            refuse_if(temp || confined, || format!("virtual table {table_name}"))
        }
        // A trigger runs with whoever fires it: one planted by a view bound to a tenant could
        // copy what the owner's SQL reads.
        AuthAction::CreateTrigger { .. } if confined => {
            Some("a view bound to a tenant may not create triggers".into())
        }
        AuthAction::CreateIndex { table_name, .. }
        | AuthAction::CreateTrigger { table_name, .. }
        | AuthAction::DropIndex { table_name, .. }
        | AuthAction::DropTrigger { table_name, .. }
        | AuthAction::DropTable { table_name }
        | AuthAction::AlterTable { table_name, .. } => refuse_if(is_own_table(table_name), || {
            format!("reshaping the store's table {table_name}")
        }),
        AuthAction::CreateTempIndex { .. }
        | AuthAction::CreateTempTable { .. }
        | AuthAction::CreateTempTrigger { .. }
        | AuthAction::CreateTempView { .. }
        | AuthAction::DropTempIndex { .. }
        | AuthAction::DropTempTable { .. }
        | AuthAction::DropTempTrigger { .. }
        | AuthAction::DropTempView { .. } => {
            Some("temporary tables, views, indexes and triggers".into())
        }
        AuthAction::Pragma { pragma_name, pragma_value } => {
            pragma_refused(pragma_name, pragma_value, confined)
        }
        AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => Some(
            "transaction and savepoint statements (the batch's transaction is the store's: \
             compose with Tx::exec and TxOutcome)"
                .into(),
        ),
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
            Some("attaching or detaching databases".into())
        }
        AuthAction::Analyze { .. } => Some("ANALYZE (it steers the store's query plans)".into()),
        AuthAction::Function { function_name } => refuse_if(
            REFUSED_FUNCTIONS.iter().any(|name| name.eq_ignore_ascii_case(function_name)),
            || format!("the function {function_name}"),
        ),
        // An action code newer than this list.
        _ => Some("an action this store does not know".into()),
    }
}

/// Whether the caller's SQL may write `table`.
fn writes_refused(table: &str) -> Option<String> {
    if is_own_table(table) {
        return Some(format!("writing the store's table {table} (use its operations)"));
    }
    let steering = STEERING_TABLES.iter().any(|name| name.eq_ignore_ascii_case(table));
    refuse_if(steering, || format!("writing SQLite's table {table}"))
}

/// Whether the caller's SQL may run `PRAGMA name [= value]` (or its table-valued function).
fn pragma_refused(name: &str, value: Option<&str>, confined: bool) -> Option<String> {
    let listed = |list: &[&str]| list.iter().any(|listed| listed.eq_ignore_ascii_case(name));
    let allowed = listed(SCHEMA_PRAGMAS)
        || (listed(READ_ONLY_PRAGMAS) && value.is_none())
        || (listed(INTEGRITY_PRAGMAS) && !confined);
    refuse_if(!allowed, || match value {
        Some(value) => format!("PRAGMA {name} = {value} (only the read-only pragmas are allowed)"),
        None => format!("PRAGMA {name} (only the read-only pragmas are allowed)"),
    })
}

fn refuse_if(refused: bool, reason: impl FnOnce() -> String) -> Option<String> {
    refused.then(reason)
}

fn is_own_table(name: &str) -> bool {
    own_tables().iter().any(|own| own.eq_ignore_ascii_case(name))
}

/// The connection settings every batch relies on, read back after a closure ran its own SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionState {
    query_only: i64,
    foreign_keys: i64,
    writable_schema: i64,
    ignore_check_constraints: i64,
    reverse_unordered_selects: i64,
    recursive_triggers: i64,
    defer_foreign_keys: i64,
    busy_timeout_ms: i64,
    synchronous: i64,
    max_page_count: i64,
    /// Databases attached besides `main` and `temp`.
    attached: i64,
    /// Objects in the `temp` schema.
    temp_objects: i64,
}

impl ConnectionState {
    /// What the store sets at open.
    #[cfg(test)]
    pub(crate) fn expected(busy_timeout_ms: i64) -> Self {
        Self {
            query_only: 0,
            foreign_keys: 1,
            writable_schema: 0,
            ignore_check_constraints: 0,
            reverse_unordered_selects: 0,
            recursive_triggers: 0,
            defer_foreign_keys: 0,
            busy_timeout_ms,
            synchronous: 2,
            max_page_count: 0,
            attached: 0,
            temp_objects: 0,
        }
    }

    /// Reads the state of `conn` in one statement.
    pub(crate) fn read(conn: &Connection) -> Result<Self> {
        let mut stmt = conn.prepare_cached(
            "SELECT (SELECT query_only FROM pragma_query_only),
                    (SELECT foreign_keys FROM pragma_foreign_keys),
                    (SELECT writable_schema FROM pragma_writable_schema),
                    (SELECT ignore_check_constraints FROM pragma_ignore_check_constraints),
                    (SELECT reverse_unordered_selects FROM pragma_reverse_unordered_selects),
                    (SELECT recursive_triggers FROM pragma_recursive_triggers),
                    (SELECT defer_foreign_keys FROM pragma_defer_foreign_keys),
                    (SELECT timeout FROM pragma_busy_timeout),
                    (SELECT synchronous FROM pragma_synchronous),
                    (SELECT max_page_count FROM pragma_max_page_count),
                    (SELECT count(*) FROM pragma_database_list WHERE name NOT IN ('main', 'temp')),
                    (SELECT count(*) FROM temp.sqlite_master)",
        )?;
        Ok(stmt.query_row([], |row| {
            Ok(Self {
                query_only: row.get(0)?,
                foreign_keys: row.get(1)?,
                writable_schema: row.get(2)?,
                ignore_check_constraints: row.get(3)?,
                reverse_unordered_selects: row.get(4)?,
                recursive_triggers: row.get(5)?,
                defer_foreign_keys: row.get(6)?,
                busy_timeout_ms: row.get(7)?,
                synchronous: row.get(8)?,
                max_page_count: row.get(9)?,
                attached: row.get(10)?,
                temp_objects: row.get(11)?,
            })
        })?)
    }

    /// Sets back every setting of `now` that differs from `self` (the caller's temporary
    /// objects went with its rolled-back savepoint). Some cannot change inside a transaction
    /// (`foreign_keys` silently, `synchronous` with an error): the check after it tells.
    pub(crate) fn restore(&self, conn: &Connection, now: &ConnectionState) -> Result<()> {
        for ((name, expected), (_, found)) in self.settings().into_iter().zip(now.settings()) {
            if expected != found {
                conn.execute_batch(&format!("PRAGMA {name} = {expected}"))?;
            }
        }
        Ok(())
    }

    /// The settings, by pragma name.
    fn settings(&self) -> [(&'static str, i64); 10] {
        [
            ("query_only", self.query_only),
            ("foreign_keys", self.foreign_keys),
            ("writable_schema", self.writable_schema),
            ("ignore_check_constraints", self.ignore_check_constraints),
            ("reverse_unordered_selects", self.reverse_unordered_selects),
            ("recursive_triggers", self.recursive_triggers),
            ("defer_foreign_keys", self.defer_foreign_keys),
            ("busy_timeout", self.busy_timeout_ms),
            ("synchronous", self.synchronous),
            ("max_page_count", self.max_page_count),
        ]
    }
}

/// What the checks of a caller's SQL know of the schema: its version, and the foreign keys
/// from callers' tables into the store's tables (`from -> to`) at that version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SchemaLinks {
    version: i64,
    links: BTreeSet<String>,
}

impl SchemaLinks {
    /// Reads `conn`'s schema (and tells `guard` its virtual tables).
    pub(crate) fn new(conn: &Connection, guard: &CallGuard) -> Self {
        let mut schema = Self { version: i64::MIN, links: BTreeSet::new() };
        schema.refresh(conn, guard);
        schema
    }

    /// Reads the schema again if it moved since the last look (`guard` is told its virtual
    /// tables); returns the links it knew before, if it moved. Links that cannot be read count
    /// as none, so that the check after a closure sees every link as new and refuses it.
    pub(crate) fn refresh(
        &mut self,
        conn: &Connection,
        guard: &CallGuard,
    ) -> Option<BTreeSet<String>> {
        let version = schema_version(conn).unwrap_or(-1);
        if version == self.version {
            return None;
        }
        self.version = version;
        guard.set_virtual_tables(virtual_tables(conn).unwrap_or_default());
        let links = foreign_keys_into_store(conn).unwrap_or_default();
        Some(std::mem::replace(&mut self.links, links))
    }

    /// A link the schema has that `before` did not.
    pub(crate) fn made_since(&self, before: &BTreeSet<String>) -> Option<&String> {
        self.links.iter().find(|link| !before.contains(*link))
    }
}

/// The names (lowercase) of the schema's virtual tables.
fn virtual_tables(conn: &Connection) -> Result<BTreeSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT lower(name) FROM main.sqlite_master
         WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'",
    )?;
    let names = stmt.query_map([], |row| row.get(0))?;
    Ok(names.collect::<rusqlite::Result<_>>()?)
}

/// Every foreign key from a table of the caller's into one of the store's tables.
fn foreign_keys_into_store(conn: &Connection) -> Result<BTreeSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.name, f.\"table\"
         FROM main.sqlite_master AS m, pragma_foreign_key_list(m.name) AS f
         WHERE m.type = 'table'",
    )?;
    let mut rows = stmt.query([])?;
    let mut links = BTreeSet::new();
    while let Some(row) = rows.next()? {
        let (from, to): (String, String) = (row.get(0)?, row.get(1)?);
        if is_own_table(&to) && !is_own_table(&from) {
            links.insert(format!("{from} -> {to}"));
        }
    }
    Ok(links)
}

/// The schema's version counter: it moves whenever any schema object is created, changed or
/// dropped.
pub(crate) fn schema_version(conn: &Connection) -> Result<i64> {
    let version: Option<i64> = conn
        .prepare_cached("SELECT schema_version FROM pragma_schema_version")?
        .query_row([], |row| row.get(0))
        .optional()?;
    Ok(version.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_tables_are_every_table_of_the_schema() -> Result<()> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(include_str!("../../../schema.sql"))?;
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             ORDER BY name",
        )?;
        let tables: Vec<String> =
            stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        let mut own: Vec<&str> = own_tables().iter().map(String::as_str).collect();
        own.sort_unstable();
        assert_eq!(tables, own);
        Ok(())
    }

    #[test]
    fn a_fresh_connection_with_the_schema_has_the_expected_state() -> Result<()> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(
            "PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 1234; PRAGMA synchronous = FULL;
",
        )?;
        conn.execute_batch(include_str!("../../../schema.sql"))?;
        let state = ConnectionState::read(&conn)?;
        assert_eq!(
            state,
            ConnectionState {
                max_page_count: state.max_page_count,
                ..ConnectionState::expected(1234)
            }
        );
        assert!(foreign_keys_into_store(&conn)?.is_empty(), "the store's own keys are not counted");
        conn.execute_batch("CREATE TABLE mine (p INTEGER REFERENCES queue_items (rowid))")?;
        let links: Vec<String> = foreign_keys_into_store(&conn)?.into_iter().collect();
        assert_eq!(links, ["mine -> queue_items"]);
        Ok(())
    }

    /// Every statement of the store's SQL (every source file of the crate) names the schema
    /// of the store's tables, so nothing a connection holds (a temporary table of the same
    /// name) can take their place.
    #[test]
    fn the_stores_statements_name_the_main_schema() -> Result<()> {
        let mut unqualified = Vec::new();
        let mut folders =
            vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder)? {
                let path = entry?.path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|ext| ext == "rs") {
                    let source = std::fs::read_to_string(&path)?;
                    unqualified.extend(
                        unqualified_tables(&source)
                            .into_iter()
                            .map(|found| format!("{}: {found}", path.display())),
                    );
                }
            }
        }
        assert!(unqualified.is_empty(), "unqualified: {unqualified:?}");
        Ok(())
    }

    /// `FROM t`, `JOIN t`, `INTO t`, `UPDATE t` for a store table `t` without its schema, in
    /// any case, inside the string literals of `source`.
    fn unqualified_tables(source: &str) -> Vec<String> {
        let keywords = ["from", "join", "into", "update"];
        let literals = source.split('"').skip(1).step_by(2);
        let words: Vec<&str> = literals
            .flat_map(|literal| literal.split(|c: char| c.is_whitespace() || c == '(' || c == ','))
            .filter(|word| !word.is_empty())
            .collect();
        words
            .windows(2)
            .filter(|pair| keywords.iter().any(|k| k.eq_ignore_ascii_case(pair[0])))
            .filter(|pair| is_own_table(pair[1]))
            .map(|pair| format!("{} {}", pair[0], pair[1]))
            .collect()
    }
}
