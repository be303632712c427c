//! Helpers shared by the integration tests: temporary store files and small checks.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use spindle::{Event, Options, Store, Stream};
use tempfile::TempDir;

/// A store file in a fresh temporary directory; the directory lives as long as the value.
pub struct TempStore {
    pub dir: TempDir,
    pub path: PathBuf,
    pub store: Store,
}

pub fn temp_store() -> TempStore {
    temp_store_with(Options::default())
}

pub fn temp_store_with(options: Options) -> TempStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("store.db");
    let store = Store::open_with(&path, options).expect("open store");
    TempStore { dir, path, store }
}

/// Appends `n` events numbered from 0 to `stream`.
pub fn append_n(store: &Store, stream: &Stream, n: u64) {
    for i in 0..n {
        store.events().append(stream, "n", json!({ "i": i })).expect("append");
    }
}

/// Every event of `stream`, read in pages.
pub fn read_stream(store: &Store, stream: &Stream) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    loop {
        let after = out.last().map_or(0, |event| event.seq);
        let page = store.events().read(stream, after, 1000).expect("read");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// The seqs of `events` are exactly 1..=n.
pub fn assert_dense(events: &[Event]) {
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected, "sequence is not dense from 1");
}

/// Counts rows of the events table through a separate, raw connection.
pub fn raw_event_count(path: &PathBuf) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("raw connection");
    conn.query_row("SELECT count(*) FROM events", [], |row| row.get(0)).expect("count")
}

pub fn payload_i(event: &Event) -> u64 {
    event.payload.get("i").and_then(Value::as_u64).expect("payload has i")
}

/// A deterministic generator (xorshift64*) for seeded model and property tests.
pub struct Dice(pub u64);

impl Dice {
    /// A generator for `seed` (any value; zero is avoided).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs test `name` of this same test binary as a child process with `key=value` in its
/// environment (the test sees the variable and plays the child), its stdout piped to the
/// caller: for tests that kill a process at an awkward moment.
pub fn spawn_child_test(name: &str, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(key, value)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child")
}

/// The files of `dir` (relative to the crate's root, or absolute), sorted: a fuzz target's
/// corpus, say.
pub fn files_in(dir: impl AsRef<std::path::Path>) -> Vec<PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Whether the suites run on the PostgreSQL engine: `SPINDLE_TEST_ENGINE=postgres`, with
/// `SPINDLE_TEST_PG` the connection string of a server to make schemas in.
pub fn on_postgres() -> bool {
    std::env::var("SPINDLE_TEST_ENGINE").is_ok_and(|engine| engine == "postgres")
}

/// Whether the suites run on SQLite file stores instead of in-memory ones:
/// `SPINDLE_TEST_ENGINE=file`. A file store reads on reader threads of its own
/// (`Options::readers`), which an in-memory store does not have: this runs every read of the
/// suites there.
pub fn on_files() -> bool {
    std::env::var("SPINDLE_TEST_ENGINE").is_ok_and(|engine| engine == "file")
}

/// A fresh, private store on the engine under test: in memory on SQLite (a file of its own
/// with `SPINDLE_TEST_ENGINE=file`), a new schema of its own on PostgreSQL.
pub fn new_store() -> Store {
    new_store_with(Options::default())
}

/// A fresh, private store with `options` on the engine under test; on PostgreSQL with
/// `SPINDLE_TEST_WRITERS` writer sessions where `options` asks for one (so that the suites
/// run again with several: `SPINDLE_TEST_WRITERS=2`).
pub fn new_store_with(mut options: Options) -> Store {
    let writers = std::env::var("SPINDLE_TEST_WRITERS").ok().and_then(|n| n.parse().ok());
    if let Some(writers) = writers.filter(|_| options.writers == 1) {
        options.writers = writers;
    }
    new_store_exact(options)
}

/// A fresh, private store with exactly `options`, whatever `SPINDLE_TEST_WRITERS` says (for
/// the tests that count writers).
pub fn new_store_exact(options: Options) -> Store {
    if on_postgres() {
        return connect_postgres(&new_postgres_location(), options);
    }
    if on_files() {
        return Store::open_with(new_store_file(), options).expect("open a store file");
    }
    Store::open_in_memory_with(options).expect("open in-memory store")
}

/// A new store file's path, in a directory of this test process's under the system's
/// temporary directory (left there: a store may outlive the test that made it).
fn new_store_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for store files");
    dir.join(format!("{}.db", uuid::Uuid::now_v7().simple()))
}

/// The connection string of a new schema of its own on the test server.
pub fn new_postgres_location() -> String {
    let server = std::env::var("SPINDLE_TEST_PG").expect("SPINDLE_TEST_PG names the test server");
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    format!("{server} options='-csearch_path={schema}'")
}

/// Opens the store at a PostgreSQL location (with the `postgres` feature).
#[cfg(feature = "postgres")]
pub fn connect_postgres(location: &str, options: Options) -> Store {
    Store::connect_with(location, options).expect("connect to the test server")
}

#[cfg(not(feature = "postgres"))]
pub fn connect_postgres(_: &str, _: Options) -> Store {
    needs_the_postgres_feature()
}

/// How a PostgreSQL run of a build without the `postgres` feature fails.
#[cfg(not(feature = "postgres"))]
fn needs_the_postgres_feature() -> ! {
    panic!(
        "SPINDLE_TEST_ENGINE=postgres needs the postgres feature (cargo test --features postgres)"
    )
}

/// A store that several handles open as separate processes would (each with its own
/// connection): a file on SQLite, a schema on PostgreSQL.
pub struct SharedStore {
    location: String,
    _dir: Option<TempDir>,
}

impl SharedStore {
    pub fn new() -> Self {
        if on_postgres() {
            return Self { location: new_postgres_location(), _dir: None };
        }
        Self::file_in(tempfile::tempdir().expect("temporary directory"))
    }

    /// A shared store for tests that reopen it often: on SQLite its file is in a tmpfs
    /// (`/dev/shm`) where there is one, so that a reopen costs no disk I/O.
    pub fn in_tmpfs() -> Self {
        let shm = std::path::Path::new("/dev/shm");
        if on_postgres() || !shm.is_dir() {
            return Self::new();
        }
        Self::file_in(tempfile::tempdir_in(shm).expect("temporary directory in /dev/shm"))
    }

    /// The SQLite store file `store.db` in `dir`, which lives as long as the value.
    fn file_in(dir: TempDir) -> Self {
        let path = dir.path().join("store.db");
        Self { location: path.display().to_string(), _dir: Some(dir) }
    }

    /// Opens the store again, on a connection of its own.
    pub fn open(&self) -> Store {
        self.open_with(Options::default())
    }

    pub fn open_with(&self, options: Options) -> Store {
        open_at(&self.location, options)
    }

    /// Where the store is (a file's path on SQLite, a connection string on PostgreSQL): what
    /// another process needs to open it with [`open_at`].
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Runs the statements `sql` on a raw connection of their own to the store's database,
    /// past the store's API (to damage a store on purpose, say). The store must exist.
    pub fn raw_execute(&self, sql: &str) {
        if on_postgres() {
            return raw_postgres_execute(&self.location, sql);
        }
        let conn = rusqlite::Connection::open(&self.location).expect("raw connection");
        conn.execute_batch(sql).expect("raw statements");
    }

    /// The number `sql` (a `SELECT count(*) ...`) answers on a raw connection of its own to the
    /// store's database: what another process sees committed.
    pub fn raw_count(&self, sql: &str) -> i64 {
        if on_postgres() {
            return raw_postgres_count(&self.location, sql);
        }
        let conn = rusqlite::Connection::open(&self.location).expect("raw connection");
        conn.query_row(sql, [], |row| row.get(0)).expect("raw count")
    }
}

impl SharedStore {
    /// A raw client of the store's PostgreSQL schema (on its search path), as another
    /// process's: to hold its locks, or to end its sessions as an administrator would.
    #[cfg(feature = "postgres")]
    pub fn raw_client(&self) -> spindle::postgres::Client {
        assert!(on_postgres(), "a raw PostgreSQL client of a SQLite store");
        raw_postgres(&self.location)
    }
}

/// Opens the store at `location` (a [`SharedStore::location`]) on the engine under test, on a
/// connection of its own: how a child process opens its parent's store.
pub fn open_at(location: &str, options: Options) -> Store {
    if on_postgres() {
        return connect_postgres(location, options);
    }
    Store::open_with(location, options).expect("open store")
}

/// The (table, column) pairs of the store's own tables, read from its database's catalogue.
pub fn store_columns(store: &SharedStore) -> std::collections::BTreeSet<(String, String)> {
    if on_postgres() {
        return raw_postgres_pairs(
            &store.location,
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema()",
        );
    }
    sqlite_columns(&store.location)
}

/// The (table, column) pairs of the tables of the SQLite file at `path`.
pub fn sqlite_columns(
    path: impl AsRef<std::path::Path>,
) -> std::collections::BTreeSet<(String, String)> {
    let conn = rusqlite::Connection::open(path).expect("raw connection");
    let mut stmt = conn
        .prepare(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
        )
        .expect("prepare");
    let pairs = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).expect("columns");
    pairs.collect::<Result<_, _>>().expect("columns")
}

#[cfg(feature = "postgres")]
fn raw_postgres_pairs(location: &str, sql: &str) -> std::collections::BTreeSet<(String, String)> {
    let rows = raw_postgres(location).query(sql, &[]).expect("raw query");
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

#[cfg(not(feature = "postgres"))]
fn raw_postgres_pairs(_: &str, _: &str) -> std::collections::BTreeSet<(String, String)> {
    needs_the_postgres_feature()
}

/// The PostgreSQL schema of the store at `location`, as lines to compare with another's: every
/// column with its type, nullability, default and collation; every constraint's and index's
/// definition (schema names left out). Two stores with the same lines have the same schema.
#[cfg(feature = "postgres")]
pub fn postgres_catalogue(location: &str) -> std::collections::BTreeSet<String> {
    let mut raw = raw_postgres(location);
    let mut lines = std::collections::BTreeSet::new();
    let columns = "SELECT table_name::text || '.' || column_name::text || ' ' || data_type::text
            || ' null=' || is_nullable::text || ' default=' || coalesce(column_default::text, '-')
            || ' collate=' || coalesce(collation_name::text, '-')
        FROM information_schema.columns WHERE table_schema = current_schema()";
    let constraints = "SELECT c.conrelid::regclass::text || ' ' || c.conname::text || ' '
            || pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = current_schema()";
    let indexes = "SELECT indexname::text || ' ' || replace(indexdef, current_schema() || '.', '')
        FROM pg_indexes WHERE schemaname = current_schema()";
    for sql in [columns, constraints, indexes] {
        for row in raw.query(sql, &[]).expect("the catalogue") {
            lines.insert(row.get::<_, String>(0));
        }
    }
    lines
}

/// A raw client of the PostgreSQL location (its schema on the search path).
#[cfg(feature = "postgres")]
fn raw_postgres(location: &str) -> spindle::postgres::Client {
    spindle::postgres::Client::connect(location, spindle::postgres::NoTls).expect("raw connection")
}

#[cfg(feature = "postgres")]
fn raw_postgres_execute(location: &str, sql: &str) {
    raw_postgres(location).batch_execute(sql).expect("raw statements");
}

#[cfg(feature = "postgres")]
fn raw_postgres_count(location: &str, sql: &str) -> i64 {
    raw_postgres(location).query_one(sql, &[]).expect("raw count").get(0)
}

#[cfg(not(feature = "postgres"))]
fn raw_postgres_execute(_: &str, _: &str) {
    needs_the_postgres_feature()
}

#[cfg(not(feature = "postgres"))]
fn raw_postgres_count(_: &str, _: &str) -> i64 {
    needs_the_postgres_feature()
}

/// Whether this test is one of the SQLite engine's own (raw SQL through `Tx::sqlite`, a
/// file's bytes): on PostgreSQL it says why it does not run and returns true.
pub fn sqlite_only(why: &str) -> bool {
    if on_postgres() {
        eprintln!("not on PostgreSQL: {why}");
    }
    on_postgres()
}

/// A value of a row read past the store's ops ([`raw_rows`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

impl Cell {
    pub fn int(&self) -> i64 {
        match self {
            Cell::Int(n) => *n,
            other => panic!("an integer, not {other:?}"),
        }
    }

    pub fn text(&self) -> String {
        match self {
            Cell::Text(text) => text.clone(),
            other => panic!("a text, not {other:?}"),
        }
    }

    pub fn opt_int(&self) -> Option<i64> {
        match self {
            Cell::Null => None,
            other => Some(other.int()),
        }
    }
}

/// Every row `sqlite` (on PostgreSQL: `postgres`) answers in `tx`, through the engine's raw SQL
/// (`Tx::sqlite`, `Tx::postgres`): a recount past the store's ops, in the op's own snapshot.
pub fn raw_rows(
    tx: &spindle::Tx<'_>,
    sqlite: &str,
    postgres: &str,
) -> spindle::Result<Vec<Vec<Cell>>> {
    if on_postgres() {
        return raw_postgres_rows(tx, postgres);
    }
    let sql = tx.sqlite()?;
    let mut statement = sql.prepare(sqlite)?;
    let columns = statement.column_count();
    let rows = statement.query_map([], |row| {
        (0..columns)
            .map(|index| {
                Ok(match row.get_ref(index)? {
                    rusqlite::types::ValueRef::Null => Cell::Null,
                    rusqlite::types::ValueRef::Integer(n) => Cell::Int(n),
                    rusqlite::types::ValueRef::Text(text) => {
                        Cell::Text(String::from_utf8_lossy(text).into_owned())
                    }
                    other => panic!("an unexpected value {other:?}"),
                })
            })
            .collect::<rusqlite::Result<Vec<Cell>>>()
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(feature = "postgres")]
fn raw_postgres_rows(tx: &spindle::Tx<'_>, sql: &str) -> spindle::Result<Vec<Vec<Cell>>> {
    use spindle::postgres::types::Type;
    let rows = tx.postgres()?.query(sql, &[])?;
    let cell = |row: &spindle::postgres::Row, index: usize| match *row.columns()[index].type_() {
        Type::INT8 => row.get::<_, Option<i64>>(index).map_or(Cell::Null, Cell::Int),
        Type::INT4 => row.get::<_, Option<i32>>(index).map_or(Cell::Null, |n| Cell::Int(n.into())),
        Type::TEXT => row.get::<_, Option<String>>(index).map_or(Cell::Null, Cell::Text),
        ref other => panic!("an unexpected column type {other}"),
    };
    Ok(rows.iter().map(|row| (0..row.len()).map(|index| cell(row, index)).collect()).collect())
}

#[cfg(not(feature = "postgres"))]
fn raw_postgres_rows(_: &spindle::Tx<'_>, _: &str) -> spindle::Result<Vec<Vec<Cell>>> {
    needs_the_postgres_feature()
}

/// `queue().stats()` and `queue().audit_counts()` in one transaction, beside a recount of the
/// tenant's items by a plain `GROUP BY` (what `stats` read before counts were kept); panics
/// unless they agree and the audit finds nothing. The check is a batch of the store's.
pub fn assert_queue_counts(store: &Store, context: &str) {
    let (stats, recount, audit) = store
        .transaction(|tx| {
            let stats = tx.exec(spindle::queue::Stats)?;
            let now_ms = tx.now_ms();
            let sql = format!(
                "SELECT queue,
                    SUM(CASE WHEN status = 'pending' AND run_at_ms <= {now_ms} THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'pending' AND run_at_ms > {now_ms} THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'claimed' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'dead' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END),
                    MIN(CASE WHEN status = 'pending' AND run_at_ms <= {now_ms}
                             THEN run_at_ms END)
                 FROM queue_items WHERE tenant_id = '{}' GROUP BY queue ORDER BY queue",
                tx.tenant()
            );
            let rows = raw_rows(tx, &sql, &sql)?;
            let mut recount: Vec<spindle::QueueStats> = rows
                .iter()
                .map(|row| {
                    let mut stats = spindle::QueueStats::empty(row[0].text());
                    stats.pending = row[1].int() as u64;
                    stats.scheduled = row[2].int() as u64;
                    stats.claimed = row[3].int() as u64;
                    stats.dead = row[4].int() as u64;
                    stats.completed = row[5].int() as u64;
                    stats.oldest_pending_age_ms = row[6].opt_int().map(|at| now_ms - at);
                    stats
                })
                .collect();
            // Paused and limited queues are reported with their settings, items or not.
            let sql = format!(
                "SELECT queue, paused, concurrency_max FROM queue_settings
                 WHERE tenant_id = '{}' AND (paused = 1 OR concurrency_max IS NOT NULL)",
                tx.tenant()
            );
            for row in raw_rows(tx, &sql, &sql)? {
                let queue = row[0].text();
                let index = match recount.binary_search_by(|s| s.queue.cmp(&queue)) {
                    Ok(index) => index,
                    Err(index) => {
                        let empty = spindle::QueueStats::empty(queue.clone());
                        recount.insert(index, empty);
                        index
                    }
                };
                recount[index].paused = row[1].int() == 1;
                recount[index].concurrency_max = row[2].opt_int().map(|max| max as u32);
            }
            let audit = tx.exec(spindle::queue::AuditCounts)?;
            Ok(spindle::TxOutcome::Commit((stats, recount, audit)))
        })
        .unwrap_or_else(|e| panic!("{context}: counts: {e}"));
    assert_eq!(stats, recount, "{context}: stats against a recount");
    assert!(audit.is_empty(), "{context}: audit_counts: {audit:?}");
}

/// `(status, count)` rows as the count ops answer them.
type StatusCounts = Vec<(String, u64)>;

fn status_counts(rows: Vec<Vec<Cell>>) -> StatusCounts {
    rows.iter().map(|row| (row[0].text(), row[1].int() as u64)).collect()
}

/// `graphs().count_by_status` for every filter it answers from its counts (none; roots only;
/// each of `kinds` alone and with roots only) and `graphs().audit_counts()`, in one
/// transaction, beside recounts of the tenant's graphs by a plain `GROUP BY`; panics unless
/// they agree and the audit finds nothing.
pub fn assert_graph_counts(store: &Store, kinds: &[&str], context: &str) {
    let mut filters: Vec<(Option<String>, bool)> = vec![(None, false), (None, true)];
    for kind in kinds {
        filters.extend([(Some((*kind).to_owned()), false), (Some((*kind).to_owned()), true)]);
    }
    let asked = filters.clone();
    let (pairs, audit) = store
        .transaction(move |tx| {
            let mut pairs = Vec::new();
            for (kind, roots_only) in &asked {
                let metadata = kind.iter().map(|kind| ("kind".to_owned(), json!(kind)));
                let filter = metadata.fold(
                    spindle::GraphFilter::default().roots_only(*roots_only),
                    |filter, (key, value)| filter.metadata(key, value),
                );
                let counted = tx.exec(spindle::graph::CountByStatus { filter })?;
                let counted: StatusCounts = counted
                    .into_iter()
                    .map(|(status, n)| (status.as_str().to_owned(), n))
                    .collect();
                pairs.push((counted, recount_graphs(tx, kind.as_deref(), *roots_only)?));
            }
            let audit = tx.exec(spindle::graph::AuditCounts)?;
            Ok(spindle::TxOutcome::Commit((pairs, audit)))
        })
        .unwrap_or_else(|e| panic!("{context}: counts: {e}"));
    for ((kind, roots_only), (counted, recount)) in filters.iter().zip(pairs) {
        assert_eq!(counted, recount, "{context}: graphs of kind {kind:?}, roots only {roots_only}");
    }
    assert!(audit.is_empty(), "{context}: audit_counts: {audit:?}");
}

/// The tenant's graphs by status (of `kind`, a plain string; roots only or not), recounted.
fn recount_graphs(
    tx: &spindle::Tx<'_>,
    kind: Option<&str>,
    roots_only: bool,
) -> spindle::Result<StatusCounts> {
    let roots = if roots_only { " AND parent_graph_id IS NULL" } else { "" };
    let (sqlite_kind, postgres_kind) = match kind {
        Some(kind) => (
            format!(
                " AND json_type(metadata, '$.kind') = 'text' AND metadata ->> '$.kind' = '{kind}'"
            ),
            format!(
                " AND jsonb_typeof(metadata::jsonb -> 'kind') = 'string'
                  AND metadata::jsonb ->> 'kind' = '{kind}'"
            ),
        ),
        None => (String::new(), String::new()),
    };
    let sql = |kind: &str| {
        format!(
            "SELECT status, count(*) FROM graphs WHERE tenant_id = '{}'{roots}{kind}
             GROUP BY status ORDER BY status",
            tx.tenant()
        )
    };
    Ok(status_counts(raw_rows(tx, &sql(&sqlite_kind), &sql(&postgres_kind))?))
}

/// `processes().count()` and `processes().audit_counts()` in one transaction, beside a recount
/// of the tenant's processes by a plain `GROUP BY`; panics unless they agree and the audit
/// finds nothing.
pub fn assert_process_counts(store: &Store, context: &str) {
    let (counts, recount, audit) = store
        .transaction(|tx| {
            let counts = tx.exec(spindle::process::CountProcesses)?;
            let sql = format!(
                "SELECT CASE WHEN wait_state IS NULL THEN status ELSE 'waiting' END, count(*)
                 FROM processes WHERE tenant_id = '{}' GROUP BY 1",
                tx.tenant()
            );
            let recount = status_counts(raw_rows(tx, &sql, &sql)?);
            let audit = tx.exec(spindle::process::AuditCounts)?;
            Ok(spindle::TxOutcome::Commit((counts, recount, audit)))
        })
        .unwrap_or_else(|e| panic!("{context}: counts: {e}"));
    let mut expected = spindle::ProcessCounts::default();
    for (state, n) in recount {
        *match state.as_str() {
            "running" => &mut expected.running,
            "waiting" => &mut expected.waiting,
            "completed" => &mut expected.completed,
            "failed" => &mut expected.failed,
            _ => &mut expected.cancelled,
        } = n;
    }
    assert_eq!(counts, expected, "{context}: process counts against a recount");
    assert!(audit.is_empty(), "{context}: audit_counts: {audit:?}");
}

/// `workflows().count_by_status()` and `workflows().audit_counts()` in one transaction, beside
/// a recount of the tenant's executions by a plain `GROUP BY`; panics unless they agree and
/// the audit finds nothing.
pub fn assert_workflow_counts(store: &Store, context: &str) {
    let (counts, recount, audit) = store
        .transaction(|tx| {
            let counts = tx.exec(spindle::workflow::CountExecutions)?;
            let counts: StatusCounts =
                counts.into_iter().map(|(status, n)| (status.as_str().to_owned(), n)).collect();
            let sql = format!(
                "SELECT status, count(*) FROM workflow_executions WHERE tenant_id = '{}'
                 GROUP BY status ORDER BY status",
                tx.tenant()
            );
            let recount = status_counts(raw_rows(tx, &sql, &sql)?);
            let audit = tx.exec(spindle::workflow::AuditCounts)?;
            Ok(spindle::TxOutcome::Commit((counts, recount, audit)))
        })
        .unwrap_or_else(|e| panic!("{context}: counts: {e}"));
    assert_eq!(counts, recount, "{context}: execution counts against a recount");
    assert!(audit.is_empty(), "{context}: audit_counts: {audit:?}");
}
